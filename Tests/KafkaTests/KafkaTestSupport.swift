import Foundation
import Kafka
import ServiceRuntime
import TestSupport

let testLogger = Logger(label: "kafka-tests")

/// Shorter group sessions than the local broker's tuning keep joins and rebalances to a second
/// or two against Tansu.
let fastGroupProperties = [
    "session.timeout.ms": "2000",
    "heartbeat.interval.ms": "500",
]

func kafkaConfiguration(brokers: String? = nil, _ properties: [String: String] = [:]) throws -> KafkaConfiguration {
    try TestEnvironment.kafkaConfiguration(brokers: brokers, properties: properties)
}

/// A topic only the calling test uses, created with `partitions` partitions.
func makeTopic(partitions: Int, brokers: String? = nil) async throws -> String {
    let name = TestEnvironment.uniqueName("t")
    let admin = KafkaAdmin(configuration: try kafkaConfiguration(brokers: brokers), logger: testLogger)
    _ = try await admin.createTopic(name, partitions: partitions)
    return name
}

func makeConsumer(
    topic: String, group: String, concurrency: Int = 8, retryBackoff: Duration = .milliseconds(200),
    buffered: Int = 1000, inFlight: Int = 1, properties: [String: String] = [:],
    handler: @escaping @Sendable (KafkaMessage) async throws -> Void
) throws -> KafkaConsumer {
    var configuration = KafkaConsumerConfiguration(
        kafka: try kafkaConfiguration(fastGroupProperties.merging(properties) { $1 }), groupID: group, topics: [topic],
        maxConcurrentPartitions: concurrency)
    configuration.retryBackoff = retryBackoff
    configuration.maxBufferedMessagesPerPartition = buffered
    configuration.maxInFlightPerPartition = inFlight
    return try KafkaConsumer(configuration: configuration, logger: testLogger, handler: handler)
}

/// Runs a service in the background; `stop()` shuts it down and rethrows what `run()` threw.
struct Running<S: Service>: Sendable {
    let service: S
    let task: Task<Void, any Error>

    init(_ service: S) {
        self.service = service
        task = Task { try await service.run() }
    }

    func stop() async throws {
        await service.shutdown()
        try await task.value
    }
}

/// Seconds since `start`, for the figures tests print.
func seconds(since start: ContinuousClock.Instant) -> String {
    let elapsed = ContinuousClock.now - start
    return String(format: "%.2f s", elapsed.inSeconds)
}
