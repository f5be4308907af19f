import AppStore
import AppStoreTestSupport
import Events
import Foundation
import FulfillmentApp
import IngressApp
import Kafka
import Pipeline
import Postgres
import ServiceRuntime
import Storage
import TestSupport
import Testing

/// The pipe through both sides: real sealed notifications stored and published by the ingress's
/// intake, applied by worker processes under leases, while workers die by `kill -9` mid-stream.
@Suite(.timeLimit(.minutes(5)))
struct PipelineKillTests {
    /// A worker stopped while events flow. Killed (SIGKILL): its leases expire and the survivor
    /// applies every event exactly once. Stopped (SIGTERM): it finishes the transactions it started,
    /// commits its offsets, leaves the group and exits 0, holding no lease an event would wait out.
    @Test(arguments: [SIGKILL, SIGTERM]) func aWorkerStoppedMidStreamLeavesEveryEventAppliedOnce(signal: Int32) async throws {
        let stream = try await RenewalStream.make(total: 2_000, chains: 300, prefix: signal == SIGKILL ? "3" : "8")
        let first = try stream.harness.startWorker("worker-a")
        let second = try stream.harness.startWorker("worker-b")
        defer {
            first.kill()
            second.kill()
        }
        #expect(await first.waitForOutput("partition assignment changed", timeout: 60), "\(first.output)")
        #expect(await second.waitForOutput("partition assignment changed", timeout: 60), "\(second.output)")
        let feeding = Task { try await stream.feed() }

        // Stop one worker while the stream is flowing, after it has applied some events (the
        // end-to-end phase runs its suites side by side on two cores: give it time).
        let busy = try await eventually(timeout: 180) {
            try await stream.count("SELECT count(*) FROM processed_event WHERE worker_id = 'worker-a'") >= 100
        }
        #expect(busy, "worker-a applied nothing: \(first.output.suffix(2000))")
        if signal == SIGKILL {
            first.kill()
        } else {
            #expect(await first.terminate(timeout: 30) == 0, "\(first.output.suffix(2000))")
        }
        #expect(try await stream.count("SELECT count(*) FROM processed_event") < stream.total, "the stop must land mid-stream")
        if signal == SIGTERM {
            #expect(
                try await stream.count(
                    "SELECT count(*) FROM inbound_event WHERE kind = 'notification' AND process_status = 'PROCESSING' AND lease_owner = 'worker-a'")
                    == 0,
                "worker-a left leased events behind")
        }
        try await feeding.value

        try await stream.expectEveryEventAppliedOnce(timeout: 120, survivors: [second])
        #expect(try await stream.count("SELECT count(*) FROM processed_event WHERE worker_id = 'worker-b'") > 0)
        // A graceful stop of an idle worker leaves the group and exits cleanly too.
        #expect(await second.terminate(timeout: 30) == 0, "\(second.output.suffix(2000))")
        await stream.shutdown()
    }

    /// The services a stream outlives a restart of.
    enum Restarted: String, CaseIterable, Sendable { case postgres, broker }

    /// PostgreSQL restarted while two workers apply a backlog: they ride it out (failed batches
    /// retried, expired leases swept). The broker restarted with nothing (the local one keeps topic,
    /// messages, offsets and groups in memory) mid-backlog, its workers then restarted: the topic is
    /// re-created and what was not applied re-published. Either way every event is applied exactly
    /// once. (Workers that stay up through such a broker restart wait: Tansu's coordinator hands the
    /// re-formed group a stale empty assignment. Apache Kafka keeps its state across restarts.)
    @Test(arguments: Restarted.allCases) func aServiceRestartedMidStreamLosesAndDoublesNothing(_ restarted: Restarted) async throws {
        let postgres = restarted == .postgres ? try await PrivatePostgres.create() : nil
        try await postgres?.start()
        let broker = restarted == .broker ? try await PrivateBroker.start() : nil
        defer {
            Task {
                await postgres?.destroy()
                await broker?.kill()
            }
        }
        let stream = try await RenewalStream.make(
            total: 3_000, chains: 300, prefix: restarted == .postgres ? "9" : "2", server: postgres?.url, brokers: broker?.brokers)
        var workers = [try stream.harness.startWorker("worker-a"), try stream.harness.startWorker("worker-b")]
        defer { for worker in workers { worker.kill() } }
        for worker in workers {
            #expect(await worker.waitForOutput("partition assignment changed", timeout: 60), "\(worker.output)")
        }
        try await stream.feed()
        let busy = try await eventually(timeout: 60) {
            try await stream.count("SELECT count(*) FROM processed_event") >= 300
        }
        #expect(busy, "nothing applied: \(workers.map { $0.output.suffix(2000) })")
        if let postgres {
            try await postgres.stop()
            try await Task.sleep(for: .seconds(2))
            try await postgres.start()
        }
        if let broker {
            for worker in workers { worker.kill() }
            try await broker.restart()
            workers = [try stream.harness.startWorker("worker-c"), try stream.harness.startWorker("worker-d")]
        }
        #expect(try await stream.count("SELECT count(*) FROM processed_event") < stream.total, "the restart must land mid-stream")

        try await stream.expectEveryEventAppliedOnce(timeout: 120, survivors: workers)
        #expect(workers.allSatisfy { $0.isRunning }, "a worker died with the \(restarted.rawValue)")
        await stream.shutdown()
    }

    /// Issue 5: three workers under a stream of 5,000 events while workers are killed with
    /// `kill -9` at random moments and restarted (under a new worker id, as a new process would be).
    @Test func threeWorkersKilledAtRandomMomentsApplyEveryEventExactlyOnce() async throws {
        let stream = try await RenewalStream.make(total: 5_000, chains: 500, prefix: "5")
        var generations = [0, 0, 0]
        var processes: [ServiceProcess] = []
        for index in 0..<3 { processes.append(try stream.harness.startWorker("w\(index)-0")) }
        defer { for process in processes { process.kill() } }
        for process in processes {
            #expect(await process.waitForOutput("partition assignment changed", timeout: 60), "\(process.output)")
        }
        let feeding = Task { try await stream.feed() }

        // Kills land only while events are open: on a loaded machine the feed may not have stored
        // its first event when the first pause ends (a CI run killed once before it had).
        var kills = 0
        while try await stream.count("SELECT count(*) FROM processed_event") < stream.total, kills < 4 {
            try await Task.sleep(for: .milliseconds(Int.random(in: 1_500...4_000)))
            let open = try await stream.count(
                "SELECT count(*) FROM inbound_event WHERE kind = 'notification' AND process_status <> 'SUCCEEDED'")
            guard open > 0 else { continue }
            let index = Int.random(in: 0..<3)
            processes[index].kill()
            kills += 1
            generations[index] += 1
            processes[index] = try stream.harness.startWorker("w\(index)-\(generations[index])")
        }
        try await feeding.value
        #expect(kills >= 3, "the stream ended before three kills landed while events were open")

        try await stream.expectEveryEventAppliedOnce(timeout: 120, survivors: processes)
        await stream.shutdown()
    }
}

/// A stream of verified DID_RENEW notifications over several chains, each of whose transactions
/// earns a grant, so "applied exactly once" is visible in credits; fed through the ingress's intake.
struct RenewalStream {
    let harness: PipelineHarness
    let pool: PostgresPool
    let producer: KafkaProducer
    let producing: Task<Void, any Error>
    let intake: NotificationIntake
    let events: [NewNotificationEvent]
    var total: Int { events.count }

    /// `prefix` keeps the original transaction ids of different tests apart.
    static func make(
        total: Int, chains: Int, prefix: String, server: String? = nil, brokers: String? = nil
    ) async throws -> RenewalStream {
        let harness = try await PipelineHarness.make(server: server, brokers: brokers)
        let configuration = try harness.configuration
        let pool = PostgresPool(configuration: configuration.postgres, logger: harness.logger)
        let producer = try KafkaProducer(configuration: configuration.kafka, logger: harness.logger)
        let producing = Task { try await producer.run() }
        try await Bootstrap.prepare(configuration: configuration, pool: pool, logger: harness.logger)
        let store = EventStore(pool: pool, topic: configuration.eventTopic)
        let intake = NotificationIntake(
            store: store, publisher: EventPublisher(producer: producer, outbox: store, logger: harness.logger))
        try await pool.query(
            """
            INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount)
            VALUES (\(IngressHarness.bundleID), 'com.example.starter.monthly', '21000000', 'starter', 2, 'P1M', 1000)
            """)
        let tokens = try await PipelineKillTests.users(chains, on: pool)
        let start = Date() - 86_400
        let events = try (0..<total).map { i -> NewNotificationEvent in
            let chain = i % chains
            let period = i / chains
            let original = prefix + String(format: "%06d", chain)
            var transaction = TestPayloads.transaction(
                bundleId: IngressHarness.bundleID, environment: .sandbox, productId: "com.example.starter.monthly",
                transactionId: period == 0 ? original : original + String(format: "%03d", period), originalTransactionId: original,
                purchaseDate: start + Double(period) * 30 * 86_400, appAccountToken: tokens[chain])
            transaction.transactionReason = period == 0 ? .purchase : .renewal
            return try harness.storedNotification(type: .didRenew, transaction: transaction)
        }
        return RenewalStream(
            harness: harness, pool: pool, producer: producer, producing: producing, intake: intake, events: events)
    }

    /// Stores and publishes every event, 50 at a time, as the ingress would.
    func feed() async throws {
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

    /// Every event SUCCEEDED exactly once: one completion and one grant per event, balances equal
    /// to their ledgers, rows equal to a replay of the facts, nothing left to publish.
    func expectEveryEventAppliedOnce(
        timeout: TimeInterval, survivors: [ServiceProcess], sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let allDone = try await eventually(timeout: timeout, every: .milliseconds(500)) {
            try await count("SELECT count(*) FROM inbound_event WHERE kind = 'notification' AND process_status = 'SUCCEEDED'") == total
        }
        #expect(
            allDone, "not every event succeeded; logs: \(survivors.map { $0.output.suffix(2000) })",
            sourceLocation: sourceLocation)
        #expect(try await count("SELECT count(*) FROM inbound_event WHERE kind = 'notification'") == total, sourceLocation: sourceLocation)
        #expect(try await count("SELECT count(*) FROM processed_event") == total, sourceLocation: sourceLocation)
        #expect(
            try await count("SELECT count(*) FROM inbound_event WHERE kind = 'notification' AND process_status <> 'SUCCEEDED'") == 0,
            sourceLocation: sourceLocation)
        #expect(try await count("SELECT count(*) FROM credit_grant") == total, sourceLocation: sourceLocation)
        #expect(try await count("SELECT count(*) FROM credit_ledger") == total, sourceLocation: sourceLocation)
        #expect(try await count("SELECT count(*) FROM payment_order") == total, sourceLocation: sourceLocation)
        #expect(
            try await count("SELECT (coalesce(sum(balance), 0) / 1000000)::bigint FROM credit_account") == total * 1000,
            sourceLocation: sourceLocation)
        #expect(
            try await count(
                """
                SELECT count(*) FROM credit_account a
                 WHERE a.balance <> (SELECT sum(delta) FROM credit_ledger l WHERE l.user_id = a.user_id AND l.pool = a.pool)
                """) == 0, sourceLocation: sourceLocation)
        #expect(try await ChainReplay.mismatches(pool: pool, now: Date()).isEmpty, sourceLocation: sourceLocation)
        let outboxDrained = try await eventually(timeout: 30) {
            try await count("SELECT count(*) FROM event_outbox") == 0
        }
        #expect(outboxDrained, sourceLocation: sourceLocation)
    }

    func shutdown() async {
        await pool.shutdown()
        await producer.shutdown()
        producing.cancel()
    }
}

extension PipelineKillTests {
    /// `count` users `user-0`… with an account token each, in one statement; the tokens in order.
    static func users(_ count: Int, on pool: PostgresPool) async throws -> [UUID] {
        let tokens = (0..<count).map { _ in UUID() }
        try await pool.query(
            """
            WITH users AS (
                INSERT INTO app_user (user_id) SELECT 'user-' || i FROM generate_series(0, \(count - 1)) AS i RETURNING user_id
            )
            INSERT INTO user_account_token (user_id, app_account_token)
            SELECT 'user-' || (t.n - 1), t.token FROM unnest(\(PostgresArray(tokens))::uuid[]) WITH ORDINALITY AS t(token, n)
            """)
        return tokens
    }
}
