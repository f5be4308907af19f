import AppStore
import AppStoreTestSupport
import Foundation
import IngressApp
import Kafka
import Pipeline
import Postgres
import ServiceRuntime
import Storage
import TestSupport
import Testing

/// Fail-over figures (issue 26), printed, never asserted: `Tests/Benchmarks/failover.sh` runs it
/// (SUBS_RUN_BENCHMARKS=1) and it is reported as skipped otherwise. Three release-built workers
/// with the shipped settings (and deploy/local's broker tuning) apply a steady stream of renewals
/// over every partition; one is killed with `kill -9` (and, in the second case, restarted at once
/// under the same name). From the applied events' times in PostgreSQL: how long after the kill
/// the dead worker's partitions had events applied again, and the longest pause of the others.
@Suite(
    .serialized, .timeLimit(.minutes(10)),
    .enabled(if: ProcessInfo.processInfo.environment["SUBS_RUN_BENCHMARKS"] == "1", "benchmark: run failover.sh"))
struct FailoverBenchmarkTests {
    static let partitions = 12
    static let rate = 60  // events a second, five a second per partition
    static let before = Duration.seconds(20)
    static let after = Duration.seconds(45)

    @Test(arguments: [false, true]) func killOneOfThreeWorkers(restart: Bool) async throws {
        let harness = try await PipelineHarness.make(partitions: Self.partitions)
        let configuration = try harness.configuration
        let logger = harness.logger
        let pool = PostgresPool(configuration: configuration.postgres, logger: logger)
        let producer = try KafkaProducer(configuration: configuration.kafka, logger: logger)
        let producing = Task { try await producer.run() }
        try await Bootstrap.prepare(configuration: configuration, pool: pool, logger: logger)
        let store = EventStore(pool: pool, topic: configuration.eventTopic)
        let intake = NotificationIntake(
            store: store, publisher: EventPublisher(producer: producer, outbox: store, logger: logger))
        try await pool.query(
            """
            INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount)
            VALUES (\(IngressHarness.bundleID), 'com.example.starter.monthly', '21000000', 'starter', 2, 'P1M', 1000)
            """)

        // The shipped settings: none of the harness's short leases, sessions and sweeps.
        var shipped = harness.serviceEnvironment
        for name in [
            "FULFILLMENT_LEASE_SECONDS", "KAFKA_PROPERTY_SESSION_TIMEOUT_MS", "KAFKA_PROPERTY_HEARTBEAT_INTERVAL_MS",
            "EVENT_SWEEP_INTERVAL_MS", "EVENT_STUCK_AFTER_SECONDS",
        ] {
            shipped.removeValue(forKey: name)
        }
        shipped["LOG_LEVEL"] = "info"
        // The restarted worker keeps its name, as a container restarted in its pod does (static
        // membership stays off: deploy/local/env.sh, Tansu never expires a dead static member).
        func start(_ name: String) throws -> ServiceProcess {
            try ServiceProcess(
                executable: "fulfillment", name: name, environment: shipped.merging(["WORKER_ID": name]) { _, new in new })
        }
        var workers = try (0..<3).map { try start("w\($0)") }
        defer { for worker in workers { worker.kill() } }
        for worker in workers {
            #expect(await worker.waitForOutput("partition assignment changed", timeout: 120), "\(worker.output.suffix(2000))")
        }

        let chains = 600
        let tokens = try await PipelineKillTests.users(chains, on: pool)
        let firstPurchase = Date() - 86_400
        var sequence = 0
        func nextEvent() throws -> NewNotificationEvent {
            defer { sequence += 1 }
            let original = "7" + String(format: "%06d", sequence % chains)
            let period = sequence / chains
            var transaction = TestPayloads.transaction(
                bundleId: IngressHarness.bundleID, environment: .sandbox, productId: "com.example.starter.monthly",
                transactionId: period == 0 ? original : original + String(format: "%03d", period), originalTransactionId: original,
                purchaseDate: firstPurchase + Double(period) * 30 * 86_400, appAccountToken: tokens[sequence % chains])
            transaction.transactionReason = period == 0 ? .purchase : .renewal
            return try harness.storedNotification(type: .didRenew, transaction: transaction)
        }
        // A steady stream, a tenth of a second's worth at a time, until the end of the window.
        func feed(for span: Duration) async throws {
            let end = ContinuousClock.now + span
            while ContinuousClock.now < end {
                let tick = ContinuousClock.now
                let batch = try (0..<(Self.rate / 10)).map { _ in try nextEvent() }
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for event in batch { group.addTask { try await intake.accept(event, awaitPublish: true) } }
                    try await group.waitForAll()
                }
                try await Task.sleep(until: tick + .milliseconds(100))
            }
        }
        try await feed(for: Self.before)
        let victim = workers[0]
        victim.kill()
        let killedAt: Date = try await pool.query("SELECT now() AS t").first!.decode("t")
        // What it had claimed and not applied: these wait until its lease runs out.
        let claimed: [Int64] = try await pool.query(
            "SELECT id FROM inbound_event WHERE process_status = 'PROCESSING' AND lease_owner = 'w0'"
        ).map { try $0.decode("id") }
        if restart { workers[0] = try start("w0") }
        try await feed(for: Self.after)
        let applied = try await eventually(timeout: 180, every: .milliseconds(500)) {
            try await pool.query(
                "SELECT count(*) AS n FROM inbound_event WHERE kind = 'notification' AND process_status <> 'SUCCEEDED'"
            ).first!.decode("n", as: Int.self) == 0
        }
        #expect(applied, "\(workers.map { $0.output.suffix(1500) })")

        // The dead worker's partitions, from the last assignment it logged.
        let assigned = victim.output.split(separator: "\n").last { $0.contains("partition assignment changed") }.map(String.init) ?? ""
        let dead = Set(
            (assigned.range(of: #""kafka.partitions":"[^"]*""#, options: .regularExpression).map { assigned[$0] } ?? "")
                .dropFirst(#""kafka.partitions":""#.count).dropLast().split(separator: ",")
                .compactMap { $0.split(separator: "/").last.flatMap { Int32($0) } })
        let rows = try await pool.query(
            """
            SELECT e.routing_key, extract(epoch FROM p.processed_at - \(killedAt)::timestamptz)::float8 AS t
              FROM processed_event p JOIN inbound_event e ON e.kind = p.event_kind AND e.id = p.event_id
             ORDER BY p.processed_at
            """)
        let reclaimed =
            try await pool.query(
                """
                SELECT max(extract(epoch FROM p.processed_at - \(killedAt)::timestamptz))::float8 AS t FROM processed_event p
                 WHERE p.event_kind = 'notification' AND p.event_id = ANY(\(PostgresArray(claimed))::bigint[])
                """
            ).first?.decode("t", as: Double?.self) ?? nil
        var times: [Int32: [Double]] = [:]
        for row in rows {
            let key: String = try row.decode("routing_key")
            times[javaPartition(Array(key.utf8), partitions: Int32(Self.partitions)), default: []].append(try row.decode("t"))
        }
        /// The longest stretch without an applied event of one partition within `window` seconds of the kill.
        func longestPause(_ partition: Int32, _ window: ClosedRange<Double>) -> Double {
            let inside = [window.lowerBound] + (times[partition] ?? []).filter(window.contains) + [window.upperBound]
            return zip(inside, inside.dropFirst()).map { $1 - $0 }.max() ?? 0
        }
        let resumed = dead.map { partition in (times[partition] ?? []).first { $0 > 0 } ?? .infinity }
        let others = Set(0..<Int32(Self.partitions)).subtracting(dead)
        let pausedAfter = others.map { longestPause($0, 0...30) }.max() ?? 0
        let pausedBefore = others.map { longestPause($0, -18...(-3)) }.max() ?? 0
        // Twice the steady stream's longest gap: a partition that stopped, not one between two events.
        let stopped = others.filter { longestPause($0, 0...30) > max(3, 2 * pausedBefore) }.count
        let figure = { (value: Double) in String(format: "%.1f", value) }
        print(
            "failover_kill_one_of_three restart=\(restart) dead_partitions=\(dead.count)"
                + " first_dead_partition_applied_s=\(figure(resumed.min() ?? .infinity))"
                + " all_dead_partitions_applied_s=\(figure(resumed.max() ?? .infinity))"
                + " other_partitions_longest_pause_s=\(figure(pausedAfter))"
                + " other_partitions_longest_pause_before_kill_s=\(figure(pausedBefore))"
                + " other_partitions_stopped=\(stopped)/\(others.count)"
                + " claimed_by_dead_worker=\(claimed.count) claimed_applied_again_s=\(reclaimed.map(figure) ?? "-")"
                + " events=\(rows.count)")
        #expect(dead.count > 0, "the killed worker's partitions are in its log")

        await pool.shutdown()
        await producer.shutdown()
        producing.cancel()
    }
}
