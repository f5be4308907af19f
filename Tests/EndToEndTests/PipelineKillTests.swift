import Events
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

/// The pipe through both sides: real sealed notifications stored and published by the ingress's
/// intake, applied by worker processes under leases, one of which dies by `kill -9` mid-stream.
@Suite(.timeLimit(.minutes(5)))
struct PipelineKillTests {
    @Test func everyEventIsAppliedExactlyOnceWhenAWorkerIsKilledMidStream() async throws {
        let harness = try await PipelineHarness.make()
        let configuration = try harness.configuration
        let pool = PostgresPool(configuration: configuration.postgres, logger: harness.logger)
        let producer = try KafkaProducer(configuration: configuration.kafka, logger: harness.logger)
        let producing = Task { try await producer.run() }
        defer { producing.cancel() }
        try await Bootstrap.prepare(configuration: configuration, pool: pool, logger: harness.logger)
        let store = EventStore(pool: pool, topic: configuration.eventTopic)
        let intake = NotificationIntake(
            store: store, publisher: EventPublisher(producer: producer, store: store, logger: harness.logger))

        let first = try harness.startWorker("worker-a")
        let second = try harness.startWorker("worker-b")
        defer {
            first.kill()
            second.kill()
        }
        #expect(await first.waitForOutput("partition assignment changed", timeout: 60), "\(first.output)")
        #expect(await second.waitForOutput("partition assignment changed", timeout: 60), "\(second.output)")

        // Real facts: each of 300 chains renews several times; every event is a verified
        // DID_RENEW whose transaction earns a grant, so "applied exactly once" is visible in credits.
        let total = 2_000
        let chains = 300
        try await pool.query(
            """
            INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount)
            VALUES (\(IngressHarness.bundleID), 'com.example.starter.monthly', '21000000', 'starter', 2, 'MONTH', 1000)
            """)
        var tokens: [UUID] = []
        for chain in 0..<chains {
            let token = UUID()
            tokens.append(token)
            try await pool.query("INSERT INTO app_user (user_id) VALUES (\("user-\(chain)"))")
            try await pool.query("INSERT INTO user_account_token (user_id, app_account_token) VALUES (\("user-\(chain)"), \(token))")
        }
        let start = Date() - 86_400
        let events = try (0..<total).map { i -> NewNotificationEvent in
            let chain = i % chains, period = i / chains
            let original = "3" + String(format: "%06d", chain)
            var transaction = TestPayloads.transaction(
                bundleId: IngressHarness.bundleID, environment: .sandbox, productId: "com.example.starter.monthly",
                transactionId: period == 0 ? original : original + String(format: "%03d", period), originalTransactionId: original,
                purchaseDate: start + Double(period) * 30 * 86_400, appAccountToken: tokens[chain])
            transaction.transactionReason = period == 0 ? .purchase : .renewal
            return try harness.storedNotification(type: .didRenew, transaction: transaction)
        }
        let feeding = Task {
            for batch in stride(from: 0, to: total, by: 50) {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for i in batch..<min(batch + 50, total) {
                        group.addTask { try await intake.accept(events[i], awaitPublish: true) }
                    }
                    try await group.waitForAll()
                }
            }
        }

        func count(_ sql: String) async throws -> Int {
            try await pool.query(PostgresQuery(unsafeSQL: sql)).first!.decode(0, as: Int.self)
        }
        // Kill one worker while the stream is flowing, after it has applied some events.
        let killedMidStream = try await eventually(timeout: 60) {
            try await count("SELECT count(*) FROM processed_event WHERE worker_id = 'worker-a'") >= 100
        }
        #expect(killedMidStream, "worker-a applied nothing: \(first.output.suffix(2000))")
        first.kill()
        let doneAtKill = try await count("SELECT count(*) FROM processed_event")
        #expect(doneAtKill < total, "the kill must land mid-stream")
        try await feeding.value

        let allDone = try await eventually(timeout: 120, every: .milliseconds(500)) {
            try await count("SELECT count(*) FROM apple_notification_event WHERE process_status = 'SUCCEEDED'") == total
        }
        #expect(allDone, "not every event succeeded; survivor log tail: \(second.output.suffix(3000))")
        #expect(try await count("SELECT count(*) FROM apple_notification_event") == total)
        #expect(try await count("SELECT count(*) FROM processed_event") == total)
        #expect(try await count("SELECT count(*) FROM processed_event WHERE worker_id = 'worker-b'") > 0)
        #expect(try await count("SELECT count(*) FROM apple_notification_event WHERE process_status <> 'SUCCEEDED'") == 0)
        // Exactly one grant per transaction, balances equal to their ledgers, rows equal to a replay.
        #expect(try await count("SELECT count(*) FROM credit_grant") == total)
        #expect(try await count("SELECT count(*) FROM credit_ledger") == total)
        #expect(try await count("SELECT count(*) FROM payment_order") == total)
        #expect(try await count("SELECT (coalesce(sum(balance), 0) / 1000000)::bigint FROM credit_account") == total * 1000)
        #expect(try await count(
            """
            SELECT count(*) FROM credit_account a
             WHERE a.balance <> (SELECT sum(delta) FROM credit_ledger l WHERE l.user_id = a.user_id AND l.pool = a.pool)
            """) == 0)
        #expect(try await ChainReplay.mismatches(pool: pool, now: Date()).isEmpty)
        let outboxDrained = try await eventually(timeout: 30) {
            try await count("SELECT count(*) FROM event_outbox") == 0
        }
        #expect(outboxDrained)

        // A graceful stop leaves the group and exits cleanly.
        #expect(second.terminate(timeout: 30) == 0, "\(second.output.suffix(2000))")
        await pool.shutdown()
        await producer.shutdown()
    }
}
