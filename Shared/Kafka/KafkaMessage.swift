/// One record header: a name and opaque bytes (names may repeat within a message).
public struct KafkaMessageHeader: Sendable, Hashable {
    public var key: String
    public var value: [UInt8]

    public init(key: String, value: [UInt8]) {
        self.key = key
        self.value = value
    }
}

/// Where the broker stored a produced message.
public struct KafkaDeliveryReport: Sendable, Hashable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64

    public init(topic: String, partition: Int32, offset: Int64) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
    }
}

/// A partition of a topic: the unit of ordering and of assignment within a consumer group.
public struct KafkaTopicPartition: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32

    public init(topic: String, partition: Int32) {
        self.topic = topic
        self.partition = partition
    }

    public static func < (lhs: Self, rhs: Self) -> Bool {
        (lhs.topic, lhs.partition) < (rhs.topic, rhs.partition)
    }

    public var description: String { "\(topic)[\(partition)]" }
}

/// A consumed record, copied out of librdkafka's buffers so it outlives the poll that read it.
public struct KafkaMessage: Sendable {
    public var topic: String
    public var partition: Int32
    public var offset: Int64
    /// Nil when the record has no key (distinct from an empty key).
    public var key: [UInt8]?
    public var value: [UInt8]
    public var headers: [KafkaMessageHeader]

    public init(
        topic: String, partition: Int32, offset: Int64, key: [UInt8]?, value: [UInt8],
        headers: [KafkaMessageHeader] = []
    ) {
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.key = key
        self.value = value
        self.headers = headers
    }

    public var topicPartition: KafkaTopicPartition { KafkaTopicPartition(topic: topic, partition: partition) }

    /// The value of the first header named `key`.
    public func header(_ key: String) -> [UInt8]? {
        headers.first { $0.key == key }?.value
    }
}
