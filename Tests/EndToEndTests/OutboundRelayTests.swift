import Domain
import Foundation
import Kafka
import Pipeline
import Postgres
import ServiceRuntime
import Storage
import TestSupport
import Testing

/// The outbound relay against a broker of its own: nothing is marked published while the broker is
/// away, and once it is back every event reaches the topic, each user's in sequence order.
@Suite(.timeLimit(.minutes(5)))
struct OutboundRelayTests {
    @Test func eventsWaitForTheBrokerAndArePublishedInOrderOnceItIsBack() async throws {
        try await withResource({ try await PrivateBroker.start() }, cleanUp: { await $0.kill() }) { broker in
            try await withTestDatabase("relay") { database in
                let logger = Logger(label: "relay-test", level: .error)
                let topic = TestEnvironment.uniqueName("outbound")
                let store = OutboundEventStore(pool: database.pool)
                let events = (0..<30).map { i in
                    OutboundEvent(
                        key: "test:\(i)", type: .creditsGranted, userID: "user-\(i % 3)", environment: "Sandbox",
                        occurredAt: Date(), data: ["n": .integer(Int64(i))])
                }
                try await database.pool.transaction { db in try await store.append(events, on: db) }

                let producer = try KafkaProducer(
                    configuration: KafkaConfiguration(brokers: broker.brokers, deliveryTimeout: .seconds(3)), logger: logger)
                let producing = Task { try await producer.run() }
                defer { producing.cancel() }
                let relay = OutboundRelay(store: store, producer: producer, topic: topic, interval: .seconds(1), logger: logger)

                await broker.kill()
                #expect(await relay.relayOnce() == 0)
                #expect(try await database.count("SELECT count(*) FROM outbound_event WHERE published_at IS NULL") == 30)

                try await broker.restart()
                _ = try await KafkaAdmin(configuration: KafkaConfiguration(brokers: broker.brokers), logger: logger)
                    .createTopic(topic, partitions: 3, replicationFactor: 1)
                let drained = try await eventually(timeout: 60) {
                    await relay.relayOnce()
                    return try await database.count("SELECT count(*) FROM outbound_event WHERE published_at IS NULL") == 0
                }
                #expect(drained)
                await producer.shutdown()

                let received = Locked<[String: [Int]]>([:])
                let consumer = try KafkaConsumer(
                    configuration: KafkaConsumerConfiguration(
                        kafka: KafkaConfiguration(
                            brokers: broker.brokers, properties: ["session.timeout.ms": "2000", "heartbeat.interval.ms": "500"]),
                        groupID: TestEnvironment.uniqueName("relay-check"), topics: [topic], maxConcurrentPartitions: 1),
                    logger: logger
                ) { message in
                    let event = try JSONSerialization.jsonObject(with: Data(message.value)) as? [String: Any]
                    let user = String(decoding: message.key ?? [], as: UTF8.self)
                    #expect(event?["userId"] as? String == user)
                    received.withLock { $0[user, default: []].append(event?["sequence"] as? Int ?? -1) }
                }
                let consuming = Task { try await consumer.run() }
                _ = await eventually(timeout: 60) { received.value.values.map(\.count).reduce(0, +) >= 30 }
                try? await Task.sleep(for: .seconds(1))
                await consumer.shutdown()
                _ = try? await consuming.value
                // Each user's events once, in sequence order (a user's are on one partition).
                #expect(received.value == ["user-0": Array(1...10), "user-1": Array(1...10), "user-2": Array(1...10)])
            }
        }
    }

    /// `OUTBOUND_EVENTS_ENABLED=false`: the relay has no producer; what writers other than
    /// fulfillment still record is marked handled, so no backlog builds up.
    @Test func withEventsDisabledRecordedEventsAreMarkedHandledUnpublished() async throws {
        try await withTestDatabase("relayoff") { database in
            let store = OutboundEventStore(pool: database.pool)
            let events = (0..<3).map { i in
                OutboundEvent(
                    key: "off:\(i)", type: .creditsGranted, userID: "user", environment: "Sandbox", occurredAt: Date(),
                    data: ["n": .integer(Int64(i))])
            }
            try await database.pool.transaction { db in try await store.append(events, on: db) }
            let relay = OutboundRelay(
                store: store, producer: nil, topic: "unused", interval: .seconds(1), logger: Logger(label: "relay-test", level: .error))
            #expect(await relay.relayOnce() == 3)
            #expect(try await store.backlog().count == 0)
            #expect(try await database.count("SELECT count(*) FROM outbound_event") == 3, "kept for the support case")
        }
    }
}
