import Foundation
import Kafka
import Postgres
import ServiceRuntime
import Storage
import Synchronization

/// Samples the backlog gauges from the source of truth every `METRICS_SAMPLE_SECONDS`, in one
/// worker at a time: the one whose own session holds `BacklogStore`'s advisory lock. That worker
/// exports them (with `subs_metrics_sampler_leader` 1); the others export none, so a dashboard
/// never sums copies or keeps a stale one, and PostgreSQL answers one sampler whatever the pool
/// size. When the leader goes, its session closes and another worker takes over within an interval.
final class BacklogSampler: Service {
    let name = "backlog-sampler"
    /// One connection of its own: the lock lives as long as its session.
    private let pool: PostgresPool
    private let store = BacklogStore()
    private let lag: @Sendable () async throws -> [KafkaPartitionLag]
    /// The credit jobs' overdue work at a time (nil: not sampled by this service).
    private let creditsOverdue: (@Sendable (Date) async throws -> (planMonths: Int, expiryClearings: Int))?
    private let interval: Duration
    private let logger: Logger
    private let stop = ShutdownTrigger()
    private let published = Mutex<(leader: Bool, families: [MetricFamily])>((false, []))
    private let failures = MetricsRegistry.shared.counter(
        "subs_metrics_sample_failures_total", help: "Backlog samples that failed (retried at the next interval)")

    init(
        configuration: PostgresConfiguration, interval: Duration, logger: Logger,
        lag: @escaping @Sendable () async throws -> [KafkaPartitionLag],
        creditsOverdue: (@Sendable (Date) async throws -> (planMonths: Int, expiryClearings: Int))? = nil
    ) {
        self.creditsOverdue = creditsOverdue
        var configuration = configuration
        configuration.maximumConnections = 1
        pool = PostgresPool(configuration: configuration, logger: logger)
        self.interval = interval
        self.logger = logger
        self.lag = lag
    }

    /// What this instance exports now: the leader flag, and the last sample while it leads.
    var families: [MetricFamily] {
        let (leader, families) = published.withLock { $0 }
        return [
            MetricFamily(
                "subs_metrics_sampler_leader", help: "1 on the worker that samples the backlog gauges, else 0",
                value: leader ? 1 : 0)
        ] + families
    }

    func run() async throws {
        while !stop.isFired {
            do {
                try await pool.withConnection { connection in
                    guard try await store.tryLead(on: connection) else { return }
                    logger.info("sampling the backlog gauges")
                    do {
                        while !stop.isFired {
                            try await sampleOnce(on: connection)
                            _ = await stop.wait(timeout: interval)
                        }
                    } catch {
                        // The lock counts its holds: give this one back before the session goes back to the pool.
                        _ = try? await store.resign(on: connection)
                        throw error
                    }
                    try await store.resign(on: connection)
                }
            } catch {
                failures.increment()
                logger.warning("metrics sample failed", ["error": .string("\(error)")])
            }
            published.withLock { $0 = (false, []) }
            if !stop.isFired { _ = await stop.wait(timeout: interval) }
        }
        await pool.shutdown()
    }

    func shutdown() async { stop.fire() }

    private func sampleOnce(on connection: PostgresConnection) async throws {
        let sample = try await store.sample(on: connection)
        var partitions: [KafkaPartitionLag]?
        do { partitions = try await lag() } catch {
            // The database gauges still hold; the lag is missing from this sample only.
            logger.warning("consumer lag not available", ["error": .string("\(error)")])
        }
        var families = Self.families(sample, lag: partitions)
        do {
            if let overdue = try await creditsOverdue?(Date()) {
                families += [
                    MetricFamily(
                        "subs_credit_plan_months_overdue", help: "Monthly grants of longer plans due over an hour ago, not granted",
                        value: Double(overdue.planMonths)),
                    MetricFamily(
                        "subs_credit_expiry_clearings_overdue",
                        help: "Subscription pools whose clearing fell due over an hour ago, not cleared", value: Double(overdue.expiryClearings)),
                ]
            }
        } catch {
            logger.warning("credit job backlog not available", ["error": .string("\(error)")])
        }
        published.withLock { $0 = (true, families) }
    }

    /// The gauges of one sample (the names the alert rules and the dashboard use).
    static func families(_ sample: BacklogSample, lag: [KafkaPartitionLag]?) -> [MetricFamily] {
        func byLabel(_ label: String, _ values: [String: Int]) -> [(labels: [String: String], value: Double)] {
            values.keys.sorted().map { ([label: $0], Double(values[$0]!)) }
        }
        var families = [
            MetricFamily("subs_outbox_messages", help: "Outbox messages not yet acknowledged by the broker", value: Double(sample.outboxMessages)),
            MetricFamily("subs_outbox_oldest_age_seconds", help: "Age of the oldest outbox message (0: none)", value: sample.outboxOldestAge),
            MetricFamily(
                "subs_events", help: "Events by status (RECEIVED, PROCESSING, RETRY_WAIT, DEAD)",
                samples: byLabel("status", sample.eventsByStatus)),
            MetricFamily(
                "subs_event_oldest_age_seconds", help: "Age since arrival of the oldest event in a status (0: none)",
                samples: sample.oldestAgeByStatus.keys.sorted().map { (["status": $0], sample.oldestAgeByStatus[$0]!) }),
            MetricFamily("subs_events_dead", help: "DEAD events by error code", samples: byLabel("error_code", sample.deadByErrorCode)),
            MetricFamily(
                "subs_unmatched_facts", help: "Unmatched facts waiting for a replay, by reason",
                samples: byLabel("reason", sample.unmatchedByReason)),
            MetricFamily(
                "subs_tasks", help: "Re-query and recovery tasks by kind and status",
                samples: sample.tasks.keys.sorted { ($0.kind, $0.status) < ($1.kind, $1.status) }.map {
                    (["kind": $0.kind, "status": $0.status], Double(sample.tasks[$0]!))
                }),
            MetricFamily(
                "subs_credit_daily_close_overdue_bills", help: "Bills of past UTC days still open",
                value: Double(sample.overdueDailyBills)),
            MetricFamily(
                "subs_credit_daily_close_delay_seconds", help: "Time since the end of the oldest UTC day with an open bill (0: none)",
                value: sample.dailyCloseDelay),
        ]
        if let age = sample.newestProductionNotificationAge {
            families.append(
                MetricFamily(
                    "subs_newest_production_notification_age_seconds", help: "Age of the newest Production notification stored",
                    value: age))
        }
        if let lag {
            families.append(
                MetricFamily(
                    "subs_kafka_consumer_lag", help: "Messages of a partition the consumer group has not committed",
                    samples: lag.map { (["topic": $0.topic, "partition": String($0.partition)], Double($0.lag)) }))
        }
        return families
    }
}
