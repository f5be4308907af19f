import AppStore
import AppStoreTestSupport
import Foundation
import FulfillmentApp
import IngressApp
import Kafka
import Pipeline
import Postgres
import ServiceRuntime
import Storage
import Testing
import TestSupport

/// Throughput of the worker pool on real facts (prints figures; asserts only correctness): a backlog
/// of renewals stored and published as the ingress would, then drained by 1 and by 2 workers.
///
/// A benchmark, not part of the test suite: it runs only from Tests/Benchmarks/fulfillment-throughput.sh
/// (which sets SUBS_RUN_BENCHMARKS=1) and is reported as skipped otherwise.
@Suite(
    .serialized, .timeLimit(.minutes(10)),
    .enabled(if: ProcessInfo.processInfo.environment["SUBS_RUN_BENCHMARKS"] == "1", "benchmark: run fulfillment-throughput.sh"))
struct FulfillmentThroughputTests {
    @Test(arguments: [1, 2]) func drainsABacklogOfRenewals(workers: Int) async throws {
        let total = 3_000
        let chains = 600
        let harness = try await PipelineHarness.make(partitions: 12)
        let configuration = try harness.configuration
        let pool = PostgresPool(configuration: configuration.postgres, logger: harness.logger)
        let producer = try KafkaProducer(configuration: configuration.kafka, logger: harness.logger)
        let producing = Task { try await producer.run() }
        defer { producing.cancel() }
        try await Bootstrap.prepare(configuration: configuration, pool: pool, logger: harness.logger)
        let store = EventStore(pool: pool, topic: configuration.eventTopic)
        let intake = NotificationIntake(
            store: store, publisher: EventPublisher(producer: producer, store: store, logger: harness.logger))
        try await pool.query(
            """
            INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount)
            VALUES (\(IngressHarness.bundleID), 'com.example.starter.monthly', '21000000', 'starter', 2, 'MONTH', 1000)
            """)
        var tokens: [UUID] = []
        for chain in 0..<chains {
            tokens.append(UUID())
            try await pool.query("INSERT INTO app_user (user_id) VALUES (\("user-\(chain)"))")
            try await pool.query(
                "INSERT INTO user_account_token (user_id, app_account_token) VALUES (\("user-\(chain)"), \(tokens[chain]))")
        }
        let start = Date() - 86_400
        let events = try (0..<total).map { i -> NewNotificationEvent in
            let chain = i % chains, period = i / chains
            let original = "4" + String(format: "%06d", chain)
            var transaction = TestPayloads.transaction(
                bundleId: IngressHarness.bundleID, environment: .sandbox, productId: "com.example.starter.monthly",
                transactionId: period == 0 ? original : original + String(format: "%03d", period),
                originalTransactionId: original, purchaseDate: start + Double(period) * 30 * 86_400,
                appAccountToken: tokens[chain])
            transaction.transactionReason = period == 0 ? .purchase : .renewal
            let renewal = TestPayloads.renewalInfo(environment: .sandbox, productId: "com.example.starter.monthly", originalTransactionId: original)
            return try harness.storedNotification(
                type: period == 0 ? .subscribed : .didRenew, subtype: period == 0 ? .initialBuy : nil,
                transaction: transaction, renewal: renewal)
        }
        for batch in stride(from: 0, to: total, by: 100) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in batch..<min(batch + 100, total) {
                    group.addTask { try await intake.accept(events[i], awaitPublish: true) }
                }
                try await group.waitForAll()
            }
        }

        var processes: [ServiceProcess] = []
        for index in 0..<workers {
            processes.append(
                try ServiceProcess(
                    executable: "fulfillment", name: "bench-\(index)",
                    environment: harness.serviceEnvironment.merging([
                        // The backlog is older than the test's stuck threshold: keep the sweeper from
                        // re-publishing it while it drains, as the default threshold would.
                        "WORKER_ID": "bench-\(index)", "LOG_LEVEL": "warning", "EVENT_STUCK_AFTER_SECONDS": "600",
                    ]) {
                        _, new in new
                    }))
        }
        defer { for process in processes { process.kill() } }
        func count(_ sql: String) async throws -> Int {
            try await pool.query(PostgresQuery(unsafeSQL: sql)).first!.decode(0, as: Int.self)
        }
        let drained = try await eventually(timeout: 300, every: .milliseconds(500)) {
            try await count("SELECT count(*) FROM apple_notification_event WHERE process_status = 'SUCCEEDED'") == total
        }
        #expect(drained, "\(processes.map { $0.output.suffix(2000) })")
        let seconds = try await pool.query(
            "SELECT extract(epoch FROM max(processed_at) - min(processed_at))::float8 AS s FROM processed_event"
        ).first!.decode("s", as: Double.self)
        let cpu = processes.map { Self.cpuSeconds(pid: $0.pid) }.reduce(0, +)
        // The backends serving this database (the workers' pools): what the events cost PostgreSQL.
        let backends = try await pool.query(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).map { try $0.decode("pid", as: Int32.self) }
        let databaseCPU = backends.map { Self.cpuSeconds(pid: $0) }.reduce(0, +)
        print(
            "fulfillment_throughput workers=\(workers) events=\(total) seconds=\(String(format: "%.2f", seconds))"
                + " events_per_second=\(Int(Double(total) / seconds))"
                + " worker_cpu_ms_per_event=\(String(format: "%.3f", cpu * 1000 / Double(total)))"
                + " postgres_cpu_ms_per_event=\(String(format: "%.3f", databaseCPU * 1000 / Double(total)))")
        #expect(try await count("SELECT count(*) FROM credit_grant") == total)
        #expect(try await ChainReplay.mismatches(pool: pool, now: Date()).isEmpty)
        await pool.shutdown()
        await producer.shutdown()
    }

    /// User plus system CPU time of a process so far (Linux `/proc/<pid>/stat`, clock ticks of 1/100 s).
    static func cpuSeconds(pid: Int32) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command: state is field 3, utime field 14, stime field 15.
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / 100
    }
}
