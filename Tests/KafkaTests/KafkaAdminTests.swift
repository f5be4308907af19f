import Kafka
import TestSupport
import Testing

@Suite("Kafka admin")
struct KafkaAdminTests {
    @Test func createTopicIsIdempotentAndReportsTheActualCount() async throws {
        let admin = KafkaAdmin(configuration: try kafkaConfiguration(), logger: testLogger)
        let topic = TestEnvironment.uniqueName("t")
        #expect(try await admin.partitionCount(topic) == nil)
        #expect(try await admin.createTopic(topic, partitions: 5) == 5)
        #expect(try await admin.createTopic(topic, partitions: 5) == 5)
        // An existing topic keeps its partitions; the caller learns the real count.
        #expect(try await admin.createTopic(topic, partitions: 7) == 5)
        #expect(try await admin.partitionCount(topic) == 5)
    }

    @Test func invalidPropertiesAreRejectedWithoutTheirValue() throws {
        let configuration = KafkaConfiguration(brokers: "127.0.0.1:1", properties: ["sasl.password.bogus": "s3cr3t"])
        let error = #expect(throws: KafkaError.self) {
            try KafkaProducer(configuration: configuration, logger: testLogger)
        }
        #expect(error?.code == .invalidArgument)
        #expect(error?.description.contains("s3cr3t") == false)
    }
}
