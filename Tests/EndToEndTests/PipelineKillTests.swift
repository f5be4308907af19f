import Events
import Foundation
import IngressApp
import Kafka
import Pipeline
import Postgres
import ServiceRuntime
import Storage
import Testing
import TestSupport

/// The pipe through both sides: stored and published by the ingress's intake, applied by worker
/// processes under leases, one of which dies by `kill -9` mid-stream.
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

        let total = 2_000
        let chains = 300
        let feeding = Task {
            for batch in stride(from: 0, to: total, by: 50) {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for i in batch..<min(batch + 50, total) {
                        group.addTask {
                            let chain = "2000000\(i % chains)"
                            try await intake.accept(
                                NewNotificationEvent(
                                    notificationUUID: UUID().uuidString.lowercased(), notificationType: "DID_RENEW",
                                    environment: "Sandbox", originalTransactionID: chain, routingKey: chain,
                                    traceID: "trace-\(i)"),
                                awaitPublish: true)
                        }
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
