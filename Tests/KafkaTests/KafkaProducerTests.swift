import Foundation
import ServiceRuntime
import TestSupport
import Testing

@testable import Kafka

@Suite("Kafka producer")
struct KafkaProducerTests {
    @Test func roundTripKeepsKeyValueAndHeaders() async throws {
        let topic = try await makeTopic(partitions: 3)
        let producer = try KafkaProducer(configuration: try kafkaConfiguration(), logger: testLogger)
        let headers = [
            KafkaMessageHeader(key: "trace", value: Array("abc".utf8)),
            KafkaMessageHeader(key: "twice", value: [1]),
            KafkaMessageHeader(key: "twice", value: [2]),
            KafkaMessageHeader(key: "empty", value: []),
        ]
        let report = try await producer.send(
            topic: topic, key: Array("key-1".utf8), value: Array("hello".utf8), headers: headers)
        await producer.shutdown()

        let received = Locked<[KafkaMessage]>([])
        let consumer = Running(
            try makeConsumer(topic: topic, group: TestEnvironment.uniqueName("g")) { message in
                received.withLock { $0.append(message) }
            })
        let arrived = await eventually { !received.value.isEmpty }
        try await consumer.stop()

        #expect(arrived)
        let message = try #require(received.value.first)
        #expect(received.value.count == 1)
        #expect(message.topic == topic)
        #expect(message.partition == report.partition)
        #expect(message.offset == report.offset)
        #expect(message.key == Array("key-1".utf8))
        #expect(message.value == Array("hello".utf8))
        #expect(message.headers == headers)
        #expect(message.header("twice") == [1])
        #expect(message.header("missing") == nil)
    }

    @Test func deliveryReportsCarryPartitionAndOffset() async throws {
        let topic = try await makeTopic(partitions: 4)
        let producer = try KafkaProducer(configuration: try kafkaConfiguration(), logger: testLogger)
        let key = Array("same-key".utf8)
        var reports: [KafkaDeliveryReport] = []
        for index in 0..<5 {
            reports.append(try await producer.send(topic: topic, key: key, value: [UInt8(index)]))
        }
        let unkeyed = try await producer.send(topic: topic, key: nil, value: [])
        await producer.shutdown()

        #expect(reports.allSatisfy { $0.topic == topic })
        #expect(Set(reports.map(\.partition)) == [javaPartition(key, partitions: 4)])
        #expect(reports.map(\.offset) == [0, 1, 2, 3, 4])
        #expect((0..<4).contains(unkeyed.partition))
        #expect(unkeyed.offset >= 0)
    }

    @Test func messagesSentInOrderKeepTheirOrderAndAreAllAcknowledged() async throws {
        let topic = try await makeTopic(partitions: 3)
        let producer = try KafkaProducer(configuration: try kafkaConfiguration(), logger: testLogger)
        let values = (0..<200).map { Array("m\($0)".utf8) }
        let sent = await producer.send(topic: topic, key: Array("user-1".utf8), inOrder: values)
        let none = await producer.send(topic: topic, key: Array("user-1".utf8), inOrder: [])
        await producer.shutdown()
        #expect(sent.acknowledged == values.count)
        #expect(sent.error == nil)
        #expect(none.acknowledged == 0 && none.error == nil)

        let received = Locked<[KafkaMessage]>([])
        let consumer = Running(
            try makeConsumer(topic: topic, group: TestEnvironment.uniqueName("g")) { message in
                received.withLock { $0.append(message) }
            })
        let arrived = await eventually { received.value.count >= values.count }
        try await consumer.stop()
        #expect(arrived)
        #expect(received.value.map(\.value) == values)
        #expect(received.value.map(\.offset) == (0..<Int64(values.count)).map { $0 })
    }

    @Test func messagesSentInOrderToAnAbsentBrokerAreNotAcknowledged() async throws {
        // Nothing listens on this port; the short timeout fails the queued messages.
        let producer = try KafkaProducer(
            configuration: try kafkaConfiguration(brokers: "127.0.0.1:1", ["message.timeout.ms": "1000"]), logger: testLogger)
        let sent = await producer.send(topic: "absent", key: Array("user-1".utf8), inOrder: [[1], [2], [3]])
        await producer.shutdown()
        #expect(sent.acknowledged == 0)
        #expect(sent.error is KafkaError)
    }

    @Test func producerEpochIsReadFromStatistics() {
        let statistics = #"{"topics":{ } , "eos": { "idemp_state": "Assigned", "producer_id": 1, "producer_epoch": 12, "epoch_cnt": 1 }}"#
        #expect(ProducerCore.producerEpoch(statistics: statistics) == 12)
        #expect(ProducerCore.producerEpoch(statistics: #"{"eos":{"producer_epoch":-1}}"#) == -1)
        #expect(ProducerCore.producerEpoch(statistics: #"{"eos":{}}"#) == nil)
    }

    @Test func swiftMurmur2MatchesKafkaReferenceValues() {
        // Values from the Java client's own murmur2 tests.
        #expect(javaMurmur2(Array("21".utf8)) == -973_932_308)
        #expect(javaMurmur2(Array("foobar".utf8)) == -790_332_482)
        #expect(javaMurmur2(Array("a-little-bit-long-string".utf8)) == -985_981_536)
        #expect(javaMurmur2(Array("a-little-bit-longer-string".utf8)) == -1_486_304_829)
        #expect(javaMurmur2(Array("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8".utf8)) == -58_897_971)
        #expect(javaMurmur2(Array("abc".utf8)) == 479_470_107)
    }

    @Test func aKeyAlwaysMapsToTheJavaClientsPartition() async throws {
        let partitions: Int32 = 12
        let topic = try await makeTopic(partitions: Int(partitions))
        let producer = try KafkaProducer(configuration: try kafkaConfiguration(), logger: testLogger)
        let keys = (0..<10_000).map { Array("customer-\($0)".utf8) }
        let started = ContinuousClock.now
        // Each key twice; sends overlap so the batch takes a moment, not one round trip each.
        let placements = try await withThrowingTaskGroup(of: (Int, Int32).self) { group in
            var placements = [[Int32]](repeating: [], count: keys.count)
            for (index, key) in (keys + keys).enumerated() {
                if index >= 2_000, let (keyIndex, partition) = try await group.next() {
                    placements[keyIndex].append(partition)
                }
                group.addTask {
                    (index % keys.count, try await producer.send(topic: topic, key: key, value: []).partition)
                }
            }
            for try await (keyIndex, partition) in group { placements[keyIndex].append(partition) }
            return placements
        }
        print("sent \(2 * keys.count) keyed messages in \(seconds(since: started))")
        await producer.shutdown()

        #expect(placements.allSatisfy { $0.count == 2 && $0[0] == $0[1] })
        let mismatches = keys.indices.filter { placements[$0].first != javaPartition(keys[$0], partitions: partitions) }
        #expect(mismatches.isEmpty, "keys placed elsewhere than murmur2 says: \(mismatches.prefix(5))")
        #expect(Set(placements.compactMap(\.first)).count == Int(partitions))
    }

    /// After a restart the broker has forgotten the producer id. librdkafka then either raises a
    /// fatal error (the next message follows one that timed out on the same partition) or bumps
    /// its epoch forever (it does not); both must end with a fresh client that delivers.
    @Test(arguments: [true, false])
    func producerRecoversAfterItsBrokerRestarts(nextSendFollowsAFailedOne: Bool) async throws {
        let broker = try await PrivateBroker.start()
        let topic = try await makeTopic(partitions: 2, brokers: broker.brokers)
        let keys = (0..<2).map { partition in
            (0...).lazy.map { Array("key-\($0)".utf8) }.first { javaPartition($0, partitions: 2) == partition }!
        }
        // A short message timeout so sends during the outage fail within the test's patience.
        let producer = try KafkaProducer(
            configuration: try kafkaConfiguration(brokers: broker.brokers, ["message.timeout.ms": "2000"]),
            logger: testLogger)
        for key in keys { _ = try await producer.send(topic: topic, key: key, value: [1]) }

        await broker.kill()
        await #expect(throws: KafkaError.self) { try await producer.send(topic: topic, key: keys[0], value: [2]) }

        try await broker.restart()
        let admin = KafkaAdmin(configuration: try kafkaConfiguration(brokers: broker.brokers), logger: testLogger)
        _ = try await admin.createTopic(topic, partitions: 2)
        let restarted = ContinuousClock.now
        let key = keys[nextSendFollowsAFailedOne ? 0 : 1]
        var failures: [KafkaError.Code] = []
        var delivered: KafkaDeliveryReport?
        while delivered == nil, ContinuousClock.now - restarted < .seconds(30) {
            do {
                delivered = try await producer.send(topic: topic, key: key, value: [3])
            } catch let error as KafkaError {
                failures.append(error.code)
            }
        }
        print("producer delivering again \(seconds(since: restarted)) after the broker restart; failed sends: \(failures)")
        #expect(delivered != nil)
        for index in 0..<3 {
            _ = try await producer.send(topic: topic, key: keys[index % 2], value: [UInt8(index)])
        }
        await producer.shutdown()
        await broker.kill()
    }
}
