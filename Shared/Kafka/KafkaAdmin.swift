import Foundation
import ServiceRuntime

/// Creates and inspects topics. Each call uses a short-lived client on a thread of its own.
public struct KafkaAdmin: Sendable {
    public let configuration: KafkaConfiguration
    public let logger: Logger

    public init(configuration: KafkaConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
    }

    /// Creates the topic with `partitions` partitions; an existing topic is fine (idempotent).
    /// Returns the partition count the broker reports, which differs from `partitions` when the
    /// topic already existed with another count. The 30 s default covers a busy broker: a cold
    /// local Tansu serving a whole test suite's start-up took more than 10 s to answer.
    public func createTopic(
        _ name: String, partitions: Int, replicationFactor: Int = 1, timeout: Duration = .seconds(30)
    ) async throws -> Int {
        let milliseconds = Self.milliseconds(timeout)
        return try await withClient { client in
            try client.handle.createTopic(name, partitions: partitions, replicationFactor: replicationFactor, timeoutMs: milliseconds)
            // The broker may answer before its metadata shows the topic.
            let deadline = ContinuousClock.now + timeout
            while true {
                if let count = try Self.partitionCount(name, on: client.handle, timeoutMs: milliseconds) { return count }
                guard ContinuousClock.now < deadline else {
                    throw KafkaError(code: .timedOut, reason: "topic \(name) was created but is not in the metadata")
                }
                Thread.sleep(forTimeInterval: 0.05)
            }
        }
    }

    /// The topic's partition count, or nil when the topic does not exist.
    public func partitionCount(_ topic: String) async throws -> Int? {
        try await withClient { client in try Self.partitionCount(topic, on: client.handle, timeoutMs: 10_000) }
    }

    private func withClient<T: Sendable>(_ body: @escaping @Sendable (RdKafkaClient) throws -> T) async throws -> T {
        let properties = configuration.librdkafkaProperties(for: .admin)
        let context = ClientContext(logger: logger)
        return try await onDedicatedThread(name: "kafka-admin") {
            try body(try RdKafkaClient(.producer, properties: properties, context: context))
        }
    }

    private static func milliseconds(_ duration: Duration) -> Int32 {
        Int32(clamping: duration.inMilliseconds)
    }

    /// The topic's partition count, or nil when the topic does not exist.
    static func partitionCount(_ topic: String, on kafka: RdKafka, timeoutMs: Int32) throws -> Int? {
        switch try kafka.topics(timeoutMs: timeoutMs)[topic] {
        case nil: return nil
        case .success(let count): return count
        case .failure(let error) where error.code == .unknownTopicOrPartition: return nil
        case .failure(let error): throw error
        }
    }
}
