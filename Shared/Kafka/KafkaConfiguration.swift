import Foundation
import ServiceRuntime

/// Settings every Kafka client shares: the bootstrap servers, the few settings this API models,
/// and any librdkafka property on top.
///
/// `librdkafkaProperties(for:)` renders them, the only place a client's librdkafka configuration
/// is put together: this module's product choices for that kind of client, then the broker list
/// and the modelled settings, then `properties`. Tuning for a particular broker (the local
/// Tansu's group and fetch timings) is not a product choice: it comes in through `properties`,
/// from `KAFKA_PROPERTY_*` (deploy/local/env.sh), so any other broker gets librdkafka's defaults.
public struct KafkaConfiguration: Sendable {
    /// `bootstrap.servers`, as in `KAFKA_BROKERS` ("host:port,host:port").
    public var brokers: String
    /// How long a producer tries to deliver a message before failing it (`message.timeout.ms`);
    /// nil: librdkafka's default (5 min).
    public var deliveryTimeout: Duration?
    /// librdkafka properties applied last, so any of them can be overridden (the escape hatch
    /// for settings this API does not model; the services read them from `KAFKA_PROPERTY_*`).
    public var properties: [String: String]

    public init(brokers: String, deliveryTimeout: Duration? = nil, properties: [String: String] = [:]) {
        self.brokers = brokers
        self.deliveryTimeout = deliveryTimeout
        self.properties = properties
    }

    /// The librdkafka properties of every `KAFKA_PROPERTY_<NAME>` variable: `<name>` lowercased
    /// with `_` → `.` (`KAFKA_PROPERTY_SECURITY_PROTOCOL=SASL_SSL` → `security.protocol`).
    public static func properties(fromEnvironment environment: [String: String]) -> [String: String] {
        let prefix = "KAFKA_PROPERTY_"
        var properties: [String: String] = [:]
        for (name, value) in environment where name.hasPrefix(prefix) && name.count > prefix.count {
            properties[name.dropFirst(prefix.count).lowercased().replacingOccurrences(of: "_", with: ".")] = value
        }
        return properties
    }

    /// The complete configuration of one librdkafka client of kind `client`.
    func librdkafkaProperties(for client: KafkaClientKind) -> [String: String] {
        // Topics are created explicitly with their partition count, never by a first send or
        // subscription: a broker's default count would move keys to other partitions.
        var rendered = ["allow.auto.create.topics": "false"]
        switch client {
        case .producer:
            rendered.merge(Self.producerChoices) { _, choice in choice }
            if let deliveryTimeout {
                rendered["message.timeout.ms"] = String(deliveryTimeout.inMilliseconds)
            }
        case .consumer(let groupID, let instanceID):
            rendered.merge(Self.consumerChoices) { _, choice in choice }
            rendered["group.id"] = groupID
            if let instanceID { rendered["group.instance.id"] = instanceID }
        case .admin:
            break
        }
        rendered["bootstrap.servers"] = brokers
        rendered.merge(properties) { _, override in override }
        return rendered
    }

    /// Keys map to partitions with `murmur2_random`, the Java client's partitioner, so producers
    /// in every language agree on where a key goes. Idempotent with `acks=all`: a retried send
    /// is never written twice and an acknowledged one survives a broker failure.
    static let producerChoices = [
        "enable.idempotence": "true",
        "acks": "all",
        "partitioner": "murmur2_random",
        "linger.ms": "5",
        // Feeds the detection of a client stuck after the broker forgot its producer id.
        "statistics.interval.ms": "1000",
    ]

    /// Offsets are stored by the consumer once handled, then committed in batches every second
    /// (what a crash hands to the next owner again); a new group starts at the beginning.
    ///
    /// Group membership is chosen for fail-over in seconds (librdkafka's defaults took 82 s
    /// without any event applied after a `kill -9` and a restart): incremental cooperative
    /// rebalancing, so a member joining or leaving moves only the partitions that change owner
    /// while the others keep working; a 10 s session, so a dead member's partitions move about
    /// 10 s after its last heartbeat (every 2 s); and a 30 s poll interval, which only a stuck
    /// poll thread can exceed (handlers run beside it, never on it). A broker whose group
    /// coordinator does not support one of them is tuned through `properties`.
    static let consumerChoices = [
        "enable.auto.offset.store": "false",
        "enable.auto.commit": "true",
        "auto.commit.interval.ms": "1000",
        "auto.offset.reset": "earliest",
        "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": "10000",
        "heartbeat.interval.ms": "2000",
        "max.poll.interval.ms": "30000",
        // Feeds the broker reachability that readiness reports.
        "statistics.interval.ms": "1000",
    ]
}

/// The kind of librdkafka client a configuration is rendered for.
enum KafkaClientKind {
    case producer
    /// `instanceID`: static membership (`group.instance.id`), nil for a dynamic member.
    case consumer(groupID: String, instanceID: String?)
    /// The short-lived clients of `KafkaAdmin` (librdkafka producers that never send).
    case admin
}

/// A consumer group's settings: which topics it reads and how much it processes at once.
public struct KafkaConsumerConfiguration: Sendable {
    public var kafka: KafkaConfiguration
    public var groupID: String
    public var topics: [String]
    /// Handlers running at once, over all partitions (the consumer's worker count): each message
    /// in flight takes one, so with `maxInFlightPerPartition` above 1 it should be above the
    /// partition count a member usually holds. Default 8.
    public var maxConcurrentPartitions: Int
    /// Messages of one partition handled at once (default 1: strictly in offset order). Above 1,
    /// only messages with different keys run together (nil keys count as one key), and a message
    /// starts only after every earlier one of its partition with the same key returned: Kafka's
    /// order per key, kept. The committed offset never passes a message not yet handled.
    public var maxInFlightPerPartition = 1
    /// First wait before a message whose handler threw is handed to the handler again; it
    /// doubles per failure up to `maxRetryBackoff`.
    public var retryBackoff: Duration = .milliseconds(200)
    public var maxRetryBackoff: Duration = .seconds(10)
    /// Messages held per partition (fetched but not yet committable: waiting, running, or handled
    /// behind one still running) before its fetching pauses (bounds memory when handlers are
    /// slower than the broker, or one message is retried); it resumes once half of that remains. A resumed
    /// partition refetches what was dropped at the pause and waits up to ~1 s for librdkafka
    /// to fetch again, so the half left should last that long.
    public var maxBufferedMessagesPerPartition = 2000
    /// Static membership (`group.instance.id`): a member that comes back under the same id within
    /// the session timeout gets its partitions back and nothing moves. Unique per live member.
    /// A stopping member still leaves the group, so a replaced one hands over at once. Default nil.
    public var instanceID: String?
    /// How long `shutdown()` waits for the last handlers, the final commit and the goodbye to the
    /// group; past it the consumer is left to the process exit (a broker that is gone never
    /// answers). Default 10 s.
    public var closeTimeout: Duration = .seconds(10)

    public init(kafka: KafkaConfiguration, groupID: String, topics: [String], maxConcurrentPartitions: Int = 8) {
        self.kafka = kafka
        self.groupID = groupID
        self.topics = topics
        self.maxConcurrentPartitions = maxConcurrentPartitions
    }
}
