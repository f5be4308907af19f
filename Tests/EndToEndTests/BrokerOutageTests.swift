import AppStore
import AppStoreTestSupport
import Foundation
import Kafka
import ServiceRuntime
import TestSupport
import Testing

/// Issue 26: the pair degrades without the broker instead of falling. The ingress starts, stays
/// ready and stores while the broker is away and publishes once it is back; a worker says it is
/// not ready; both stop within SHUTDOWN_GRACE_SECONDS whatever the broker does.
@Suite(.timeLimit(.minutes(5)))
struct BrokerOutageTests {
    let path = "/api/v1/iap/apple/notifications/sandbox"

    func signed(_ harness: IngressHarness) throws -> String {
        try harness.signer.signNotification(
            type: .didRenew, bundleId: IngressHarness.bundleID, environment: .sandbox,
            transaction: TestPayloads.transaction(bundleId: IngressHarness.bundleID, environment: .sandbox))
    }

    @Test func theIngressStartsWithoutTheBrokerIsReadyStoresAndPublishesOnceTheBrokerIsUp() async throws {
        try await withResource({ try await PrivateBroker.start() }, cleanUp: { await $0.kill() }) { broker in
            await broker.kill()
            try await IngressHarness.with(extra: ["KAFKA_BROKERS": broker.brokers]) { harness in
                let ready = try await harness.internalClient.get("/readyz")
                #expect(ready.status == 200, "ready while PostgreSQL is: \(ready.text)")
                #expect(try ready.json()["kafka"] as? String != "ok")
                let metrics = try await harness.internalClient.get("/metrics").text
                #expect(metrics.contains("\nsubs_broker_up 0"), "\(metrics.split(separator: "\n").filter { $0.contains("broker") })")

                for _ in 0..<5 {
                    let response = try await harness.client.post(path, json: ["signedPayload": try signed(harness)])
                    #expect(response.status == 200, "\(response.text)")
                }
                #expect(try await harness.count("SELECT count(*) FROM event_outbox") == 5, "nothing could be published")

                try await broker.restart()
                let drained = try await eventually(timeout: 90, every: .milliseconds(500)) {
                    try await harness.count("SELECT count(*) FROM event_outbox") == 0
                }
                #expect(drained, "the sweeper publishes the outbox once the broker answers: \(harness.process.output.suffix(3000))")
                let seen = try await IngressResilienceTests.publishedEventIDs(
                    brokers: broker.brokers, topic: harness.pipeline.topic, expected: 5)
                #expect(seen.count == 5, "published \(seen.count) of 5")
                let partitions = try await KafkaAdmin(
                    configuration: KafkaConfiguration(brokers: broker.brokers), logger: Logger(label: "e2e", level: .warning)
                ).partitionCount(harness.pipeline.topic)
                #expect(partitions == harness.pipeline.partitions, "the sweeper created the topic with its partitions")
                let up = try await eventually(timeout: 30) {
                    try await harness.internalClient.get("/metrics").text.contains("\nsubs_broker_up 1")
                }
                #expect(up)
            }
        }
    }

    /// The producer holds undelivered messages and the sweeper waits on the broker: neither keeps
    /// the process past the grace, and what was not published stays in the outbox. (Unbounded,
    /// the flush alone took 10 s and the sweeper's topic check 30 s.)
    @Test func sigtermWithTheBrokerDownExitsWithinTheGraceLeavingTheRestInTheOutbox() async throws {
        try await withResource({ try await PrivateBroker.start() }, cleanUp: { await $0.kill() }) { broker in
            try await IngressHarness.with(extra: ["KAFKA_BROKERS": broker.brokers, "SHUTDOWN_GRACE_SECONDS": "2"]) { harness in
                await broker.kill()
                for _ in 0..<10 {
                    let response = try await harness.client.post(path, json: ["signedPayload": try signed(harness)])
                    #expect(response.status == 200, "\(response.text)")
                }
                #expect(await harness.process.terminate(timeout: 20) == 0, "\(harness.process.output.suffix(3000))")
                #expect(try await harness.count("SELECT count(*) FROM event_outbox") == 10)
            }
        }
    }

    /// A worker that lost the broker applies nothing, whatever its last assignment says: it says
    /// so on /readyz, and SIGTERM still ends it within the grace (the consumer's close waited for
    /// a broker that was gone, minutes once).
    @Test func aWorkerWithoutTheBrokerIsNotReadyAndStillStopsWithinTheGrace() async throws {
        try await withResource({ try await PrivateBroker.start() }, cleanUp: { await $0.kill() }) { broker in
            let pipeline = try await PipelineHarness.make(brokers: broker.brokers)
            let worker = try ServiceProcess(
                executable: "fulfillment", name: "worker-outage",
                environment: pipeline.serviceEnvironment.merging(["WORKER_ID": "worker-outage", "SHUTDOWN_GRACE_SECONDS": "4"]) {
                    _, new in new
                })
            defer { worker.kill() }
            #expect(await worker.waitForOutput("partition assignment changed", timeout: 60), "\(worker.output.suffix(3000))")
            let port = try #require(worker.httpPort)
            let client = TestHTTPClient(port: port)
            var answer = ""
            let ready = try await eventually(timeout: 30) {
                let response = try await client.get("/readyz")
                answer = response.text
                return response.status == 200
            }
            #expect(ready, "\(answer)")

            await broker.kill()
            var reason = ""
            let unready = try await eventually(timeout: 30) {
                let response = try await client.get("/readyz")
                reason = (try? response.json()["reason"] as? String) ?? response.text
                return response.status == 503
            }
            #expect(unready, "\(reason)")
            #expect(reason.contains("broker unreachable"), "\(reason)")
            #expect(try await client.get("/healthz").status == 200, "alive: a restart would not bring the broker back")

            #expect(await worker.terminate(timeout: 20) == 0, "\(worker.output.suffix(3000))")
            // librdkafka retried its connections all along: one line per kind and 10 s, with a count.
            let repeats = worker.output.split(separator: "\n").filter { $0.contains("librdkafka") }.count
            #expect(repeats < 20, "\(repeats) librdkafka lines: \(worker.output.suffix(3000))")
        }
    }
}
