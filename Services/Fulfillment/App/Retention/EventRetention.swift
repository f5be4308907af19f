import Foundation
import Postgres
import ServiceRuntime
import Storage

/// The retention settings of a worker, read from its environment.
public struct EventRetentionConfiguration: Sendable {
    /// `EVENT_RETENTION_INTERVAL_SECONDS`: how often the job runs (nil: 0, never in this process). Default 3600.
    public var interval: Duration?
    /// `EVENT_PARTITIONS_AHEAD`: months after the current one whose partitions exist. Default 1:
    /// every partition, empty ones too, costs each statement on the table some planning.
    public var partitionsAhead: Int
    /// `PAYLOAD_RETENTION_DAYS`: sealed payloads of applied events received longer ago are
    /// redacted (nil: 0, kept forever). Default 400: Apple's history reaches back 180 days.
    public var payloadRetentionDays: Int?
    /// `EVENT_RETENTION_MONTHS`: partitions of months that ended this many months before the
    /// current one are detached (nil: 0, the default, keeps every month). At least 7, so no
    /// notification Apple may still send or return (180 days back) finds its month gone.
    public var eventRetentionMonths: Int?
    /// Payloads redacted per transaction.
    public var batchSize = 1000

    public init(interval: Duration? = .seconds(3600), partitionsAhead: Int = 1, payloadRetentionDays: Int? = 400, eventRetentionMonths: Int? = nil) {
        self.interval = interval
        self.partitionsAhead = partitionsAhead
        self.payloadRetentionDays = payloadRetentionDays
        self.eventRetentionMonths = eventRetentionMonths
    }

    public init(reader: ConfigurationReader) {
        let interval = reader.int("EVENT_RETENTION_INTERVAL_SECONDS", default: 3600, range: 0...86_400)
        self.interval = interval == 0 ? nil : .seconds(interval)
        partitionsAhead = reader.int("EVENT_PARTITIONS_AHEAD", default: 1, range: 1...24)
        let days = reader.int("PAYLOAD_RETENTION_DAYS", default: 400, range: 0...36_500)
        payloadRetentionDays = days == 0 ? nil : days
        let months = reader.int("EVENT_RETENTION_MONTHS", default: 0, range: 0...1200)
        if (1...6).contains(months) {
            reader.report("EVENT_RETENTION_MONTHS", String(months), "0 (keep every month) or at least 7 (Apple's history reaches 180 days back)")
        }
        eventRetentionMonths = months == 0 ? nil : months
    }
}

/// Runs the retention of events in a worker every interval: partitions created ahead, old
/// payloads redacted, old months detached (`EventStore+Retention`, safe with several workers),
/// with its counters and the partitions-ahead gauge.
final class EventRetention: Service {
    let name = "event-retention"
    let store: EventStore
    /// Who the audit rows of its changes name: the worker's id.
    let actor: String
    let configuration: EventRetentionConfiguration
    private let clock: any WallClock
    private let logger: Logger
    private let stop = ShutdownTrigger()
    private let redacted = MetricsRegistry.shared.counter(
        "subs_event_payloads_redacted_total", help: "Sealed payloads of applied events redacted after PAYLOAD_RETENTION_DAYS")
    private let created = MetricsRegistry.shared.counter(
        "subs_event_partitions_created_total", help: "Monthly partitions of the event table created ahead")
    private let detached = MetricsRegistry.shared.counter(
        "subs_event_partitions_detached_total", help: "Monthly partitions of the event table detached after EVENT_RETENTION_MONTHS")
    private let ahead = MetricsRegistry.shared.gauge(
        "subs_event_partitions_ahead", help: "Months after the current one that have their event partition")
    private let lastRun = MetricsRegistry.shared.gauge(
        "subs_event_retention_last_run_timestamp_seconds", help: "When this worker last completed a retention pass")
    private let failures = MetricsRegistry.shared.counter(
        "subs_event_retention_failures_total", help: "Retention passes that failed (retried at the next interval)")

    init(store: EventStore, actor: String, configuration: EventRetentionConfiguration, clock: any WallClock, logger: Logger) {
        self.store = store
        self.actor = actor
        self.configuration = configuration
        self.clock = clock
        self.logger = logger
    }

    func run() async throws {
        guard let interval = configuration.interval else { return await stop.wait() }
        while !stop.isFired {
            do {
                try await runOnce(now: clock.now())
            } catch {
                failures.increment()
                logger.warning("event retention pass failed", ["error": .string("\(error)")])
            }
            _ = await stop.wait(timeout: interval)
        }
    }

    func shutdown() async { stop.fire() }

    /// One pass at `now`: partitions first (intake must never lack one), then redaction, then detachment.
    func runOnce(now: Date) async throws {
        let made = try await store.createPartitions(now: now, ahead: configuration.partitionsAhead, by: actor)
        created.increment(by: made.count)
        for partition in made { logger.info("event partition created", ["event.partition": .string(partition)]) }
        if let days = configuration.payloadRetentionDays {
            let count = try await store.redactPayloads(
                receivedBefore: now - Double(days) * 86_400, batchSize: configuration.batchSize,
                reason: "PAYLOAD_RETENTION_DAYS=\(days)", by: actor)
            redacted.increment(by: count)
            if count > 0 { logger.info("event payloads redacted", ["event.redacted": .int(Int64(count))]) }
        }
        if let months = configuration.eventRetentionMonths {
            let gone = try await store.detachPartitions(now: now, retentionMonths: months, by: actor)
            detached.increment(by: gone.count)
            for partition in gone { logger.notice("event partition detached", ["event.partition": .string(partition)]) }
        }
        ahead.set(Double(try await store.monthsAhead(now: now)))
        lastRun.set(now.timeIntervalSince1970)
    }
}
