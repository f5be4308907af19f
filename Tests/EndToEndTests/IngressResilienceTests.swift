import AppStore
import AppStoreTestSupport
import Events
import Foundation
import Kafka
import Postgres
import ServiceRuntime
import Synchronization
import TestSupport
import Testing

/// What happens to Apple's notifications when PostgreSQL, the broker or the ingress itself fail.
@Suite(.timeLimit(.minutes(5)))
struct IngressResilienceTests {
    let path = "/api/v1/iap/apple/notifications/sandbox"

    func signed(_ harness: IngressHarness) throws -> String {
        try harness.signer.signNotification(
            type: .didRenew, bundleId: IngressHarness.bundleID, environment: .sandbox,
            transaction: TestPayloads.transaction(bundleId: IngressHarness.bundleID, environment: .sandbox))
    }

    @Test func databaseDownAnswers503AndNothingIsLostOnceItIsBack() async throws {
        try await PrivatePostgres.with { postgres in
            // A cluster of its own, which no migration reached: the ingress migrates it as on a lone machine.
            try await IngressHarness.with(extra: ["DATABASE_URL": postgres.url, "MIGRATE_ON_START": "true"]) { harness in
                let before = try await harness.client.post(path, json: ["signedPayload": try signed(harness)])
                #expect(before.status == 200)
                try await postgres.stop()
                let during = try await harness.client.post(path, json: ["signedPayload": try signed(harness)])
                #expect(during.status == 503, "\(during.text)")
                #expect(try during.json()["code"] as? String == "SERVICE_UNAVAILABLE")
                // Readiness is observed in the background, every half second.
                let unready = try await eventually(timeout: 10) { try await harness.client.get("/readyz").status == 503 }
                #expect(unready)
                try await postgres.start()
                let retried = try await eventually(timeout: 30) {
                    try await harness.client.post(path, json: ["signedPayload": try signed(harness)]).status == 200
                }
                #expect(retried, "accepted again once PostgreSQL is back")
                #expect(try await harness.count("SELECT count(*) FROM inbound_event WHERE kind = 'notification'") == 2)
            }
        }
    }

    @Test func brokerDownOrIngressKilledBeforePublishingLosesNothing() async throws {
        try await withResource({ try await PrivateBroker.start() }, cleanUp: { await $0.kill() }) { broker in
            try await IngressHarness.with(extra: ["KAFKA_BROKERS": broker.brokers]) { harness in
                await broker.kill()
                var accepted: Set<String> = []
                for _ in 0..<20 {
                    let response = try await harness.client.post(path, json: ["signedPayload": try signed(harness)])
                    #expect(response.status == 200, "durable in PostgreSQL even with the broker down: \(response.text)")
                    accepted.insert(try #require(try response.json()["notificationUUID"] as? String))
                }
                #expect(try await harness.count("SELECT count(*) FROM event_outbox") == 20, "nothing could be published")
                // The ingress dies with everything committed and nothing published.
                harness.process.kill()

                try await broker.restart()
                let second = try await IngressHarness.launch(harness.environment)
                defer { second.kill() }
                let drained = try await eventually(timeout: 60, every: .milliseconds(500)) {
                    try await harness.count("SELECT count(*) FROM event_outbox") == 0
                }
                #expect(drained, "the relay of the restarted ingress publishes what was left: \(second.output.suffix(2000))")

                let seen = try await Self.publishedEventIDs(brokers: broker.brokers, topic: harness.pipeline.topic, expected: 20)
                #expect(seen.count == 20, "published \(seen.count) of 20")
                let partitions = try await KafkaAdmin(
                    configuration: KafkaConfiguration(brokers: broker.brokers), logger: Logger(label: "e2e", level: .warning)
                ).partitionCount(harness.pipeline.topic)
                #expect(partitions == harness.pipeline.partitions, "the topic came back with its configured partitions")
            }
        }
    }

    /// The broker restarts under a running ingress and comes back empty (Tansu in memory): the
    /// ingress keeps answering 200, re-creates the topic and publishes everything it stored.
    @Test func aBrokerRestartUnderARunningIngressLosesNothing() async throws {
        try await withResource({ try await PrivateBroker.start() }, cleanUp: { await $0.kill() }) { broker in
            try await IngressHarness.with(extra: ["KAFKA_BROKERS": broker.brokers]) { harness in
                for _ in 0..<10 {
                    #expect(try await harness.client.post(path, json: ["signedPayload": try signed(harness)]).status == 200)
                }
                try await broker.restart()
                for _ in 0..<10 {
                    let response = try await harness.client.post(path, json: ["signedPayload": try signed(harness)])
                    #expect(response.status == 200, "durable whatever the broker does: \(response.text)")
                }
                let drained = try await eventually(timeout: 60, every: .milliseconds(500)) {
                    try await harness.count("SELECT count(*) FROM event_outbox") == 0
                }
                #expect(drained, "\(harness.process.output.suffix(3000))")
                // The ten sent after the restart are on the new topic (the ten before went with the old one;
                // the workers' sweeper re-publishes those that were never applied).
                let seen = try await Self.publishedEventIDs(brokers: broker.brokers, topic: harness.pipeline.topic, expected: 10)
                #expect(seen.count >= 10, "published \(seen.count) after the restart")
            }
        }
    }

    @Test func aThousandConcurrentNotificationsWithDuplicatesGiveOneRowEach() async throws {
        try await IngressHarness.with(extra: ["INGRESS_NOTIFICATION_RATE_PER_SECOND": "100000", "INGRESS_NOTIFICATION_RATE_BURST": "100000"]) {
            harness in
            let payloads = try (0..<1000).map { _ in try signed(harness) }
            let bodies = payloads + payloads.prefix(200)
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for payload in bodies {
                    group.addTask {
                        try await harness.client.post(path, json: ["signedPayload": payload]).status
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.allSatisfy { $0 == 200 }, "\(Dictionary(grouping: statuses, by: { $0 }).mapValues(\.count))")
            #expect(try await harness.count("SELECT count(*) FROM inbound_event WHERE kind = 'notification'") == 1000)
            let published = try await eventually(timeout: 30) { try await harness.count("SELECT count(*) FROM event_outbox") == 0 }
            #expect(published)
            let seen = try await Self.publishedEventIDs(
                brokers: try TestEnvironment.kafkaBrokers(), topic: harness.pipeline.topic, expected: 1000)
            #expect(seen.count == 1000, "one message per stored notification")
        }
    }

    /// The ingress stopped (SIGTERM) or killed (SIGKILL) while notifications stream in: every one
    /// it answered 200 is stored, and a restarted ingress publishes each stored one.
    @Test(arguments: [SIGTERM, SIGKILL]) func stoppedUnderAStreamEveryAcknowledgedNotificationSurvives(signal: Int32) async throws {
        try await IngressHarness.with(extra: ["INGRESS_NOTIFICATION_RATE_PER_SECOND": "100000", "INGRESS_NOTIFICATION_RATE_BURST": "100000"]) {
            harness in
            let payloads = try (0..<800).map { _ in try signed(harness) }
            let next = Locked(0)
            let acknowledged = Locked<Set<String>>([])
            let senders = Task {
                await withTaskGroup(of: Void.self) { group in
                    for _ in 0..<16 {
                        group.addTask {
                            while true {
                                let index = next.withLock { value in
                                    defer { value += 1 }
                                    return value
                                }
                                guard index < payloads.count else { return }
                                // A refused or cut connection is Apple's cue to retry later: not acknowledged.
                                guard let response = try? await harness.client.post(path, json: ["signedPayload": payloads[index]]),
                                    response.status == 200, let uuid = try? response.json()["notificationUUID"] as? String
                                else { continue }
                                acknowledged.withLock { _ = $0.insert(uuid) }
                            }
                        }
                    }
                }
            }
            let midStream = await eventually(timeout: 60) { acknowledged.value.count >= 200 }
            #expect(midStream, "\(acknowledged.value.count) acknowledged: \(harness.process.output.suffix(3000))")
            if signal == SIGTERM {
                #expect(await harness.process.terminate(timeout: 30) == 0, "\(harness.process.output.suffix(8000))")
            } else {
                harness.process.kill()
            }
            await senders.value
            let answered = acknowledged.value
            #expect(answered.count < payloads.count, "the stop must land mid-stream")

            let stored = Set(
                try await harness.pool.query("SELECT notification_uuid FROM inbound_event WHERE kind = 'notification'").map {
                    try $0.decode("notification_uuid", as: String.self)
                })
            #expect(answered.isSubset(of: stored), "answered 200 but not stored: \(answered.subtracting(stored).prefix(5))")

            let second = try await IngressHarness.launch(harness.environment)
            defer { second.kill() }
            let drained = try await eventually(timeout: 60, every: .milliseconds(500)) {
                try await harness.count("SELECT count(*) FROM event_outbox") == 0
            }
            #expect(drained, "the restarted ingress publishes what was left: \(second.output.suffix(2000))")
            let seen = try await Self.publishedEventIDs(
                brokers: try TestEnvironment.kafkaBrokers(), topic: harness.pipeline.topic, expected: stored.count)
            #expect(seen.count == stored.count, "published \(seen.count) of \(stored.count) stored")
        }
    }

    /// Reads the event topic from the start and returns the distinct event ids it carries.
    static func publishedEventIDs(brokers: String, topic: String, expected: Int) async throws -> Set<Int64> {
        let seen = Locked<Set<Int64>>([])
        let consumer = try KafkaConsumer(
            configuration: KafkaConsumerConfiguration(
                kafka: try TestEnvironment.kafkaConfiguration(
                    brokers: brokers, properties: ["session.timeout.ms": "2000", "heartbeat.interval.ms": "500"]),
                groupID: TestEnvironment.uniqueName("check"), topics: [topic]),
            logger: Logger(label: "e2e", level: .warning)
        ) { message in
            if let envelope = EventEnvelope.decode(message.value) { seen.withLock { _ = $0.insert(envelope.eventID) } }
        }
        let consuming = Task { try await consumer.run() }
        _ = await eventually(timeout: 60) { seen.value.count >= expected }
        // Anything beyond the expected count would show up within a moment.
        try? await Task.sleep(for: .milliseconds(500))
        await consumer.shutdown()
        _ = try? await consuming.value
        return seen.value
    }
}
