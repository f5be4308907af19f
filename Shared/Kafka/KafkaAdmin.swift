import CRdKafka
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
            try Self.create(name, partitions: partitions, replicationFactor: replicationFactor, on: client.handle, timeoutMs: milliseconds)
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
            try body(try RdKafkaClient(type: RD_KAFKA_PRODUCER, properties: properties, context: context))
        }
    }

    private static func milliseconds(_ duration: Duration) -> Int32 {
        Int32(clamping: duration.inMilliseconds)
    }

    private static func create(
        _ name: String, partitions: Int, replicationFactor: Int, on rk: OpaquePointer, timeoutMs: Int32
    ) throws {
        var errstr = [CChar](repeating: 0, count: 512)
        guard let topic = rd_kafka_NewTopic_new(name, Int32(partitions), Int32(replicationFactor), &errstr, errstr.count)
        else { throw KafkaError(code: .invalidArgument, reason: String(errorBuffer: errstr)) }
        defer { rd_kafka_NewTopic_destroy(topic) }
        let options = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS)
        defer { rd_kafka_AdminOptions_destroy(options) }
        _ = rd_kafka_AdminOptions_set_operation_timeout(options, timeoutMs, &errstr, errstr.count)
        _ = rd_kafka_AdminOptions_set_request_timeout(options, timeoutMs, &errstr, errstr.count)
        let queue = rd_kafka_queue_new(rk)
        defer { rd_kafka_queue_destroy(queue) }

        var topics: [OpaquePointer?] = [topic]
        rd_kafka_CreateTopics(rk, &topics, 1, options, queue)
        // The request carries its own timeout; the margin lets its error arrive first.
        guard let event = rd_kafka_queue_poll(queue, timeoutMs + 5000) else {
            throw KafkaError(code: .timedOut, reason: "no answer to CreateTopics for \(name)")
        }
        defer { rd_kafka_event_destroy(event) }
        let err = rd_kafka_event_error(event)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else {
            throw KafkaError(err, reason: String(cString: rd_kafka_event_error_string(event)))
        }
        var count = 0
        guard let result = rd_kafka_event_CreateTopics_result(event),
            let results = rd_kafka_CreateTopics_result_topics(result, &count), count == 1, let topicResult = results[0]
        else { throw KafkaError(code: .invalidState, reason: "CreateTopics answered without a topic result") }
        let topicErr = rd_kafka_topic_result_error(topicResult)
        guard topicErr == RD_KAFKA_RESP_ERR_NO_ERROR || topicErr == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS else {
            throw KafkaError(topicErr, reason: rd_kafka_topic_result_error_string(topicResult).map { String(cString: $0) })
        }
    }

    /// Reads the metadata of all topics: asking for one topic by name could make a broker that
    /// auto-creates topics create it.
    static func partitionCount(_ topic: String, on rk: OpaquePointer, timeoutMs: Int32) throws -> Int? {
        var metadata: UnsafePointer<rd_kafka_metadata_t>?
        let err = rd_kafka_metadata(rk, 1, nil, &metadata, timeoutMs)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR, let metadata else { throw KafkaError(err) }
        defer { rd_kafka_metadata_destroy(metadata) }
        for index in 0..<Int(metadata.pointee.topic_cnt) {
            let entry = metadata.pointee.topics[index]
            guard String(cString: entry.topic) == topic else { continue }
            if entry.err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART { return nil }
            guard entry.err == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(entry.err) }
            return Int(entry.partition_cnt)
        }
        return nil
    }
}
