import Foundation
import Kafka
import Postgres
import ServiceRuntime
import Storage

/// Settings both services share: where PostgreSQL and the broker are, and the event topic.
public struct PipelineConfiguration: Sendable {
    /// libpq URI (`DATABASE_URL`). Required.
    public var databaseURL: String
    /// Pool size per process (`DATABASE_MAX_CONNECTIONS`). Default 16.
    public var databaseMaxConnections: Int
    /// Bootstrap servers (`KAFKA_BROKERS`). Required.
    public var kafkaBrokers: String
    /// Extra librdkafka properties: every `KAFKA_PROPERTY_<NAME>` becomes `<name>` with `_` → `.`
    /// (e.g. `KAFKA_PROPERTY_SECURITY_PROTOCOL=SASL_SSL` → `security.protocol`).
    public var kafkaProperties: [String: String]
    /// The event topic (`EVENT_TOPIC`). Default `appstore.events.v1`.
    public var eventTopic: String
    /// Partitions of the event topic when it is created (`EVENT_TOPIC_PARTITIONS`). Default 12.
    public var eventTopicPartitions: Int
    /// Replicas of each partition when the topic is created (`EVENT_TOPIC_REPLICATION_FACTOR`).
    /// Default 1 (one local broker); 3 on a real cluster.
    public var eventTopicReplicationFactor: Int
    /// Whether the services create the topic when it is missing (`EVENT_TOPIC_CREATE`). Default
    /// true; false where the broker forbids CreateTopics: then a missing topic stops start-up.
    public var eventTopicCreate: Bool
    /// The topic of the app's outbound events (`OUTBOUND_EVENT_TOPIC`), created at start-up like
    /// the event topic (same replication factor and `EVENT_TOPIC_CREATE`). Default
    /// `subscriptions.events.v1`.
    public var outboundEventTopic: String
    /// Partitions of the outbound topic when it is created (`OUTBOUND_EVENT_TOPIC_PARTITIONS`);
    /// the key is the user, so a user's events stay in order on one. Default 12.
    public var outboundEventTopicPartitions: Int
    /// Whether changes write outbound events and the worker publishes them
    /// (`OUTBOUND_EVENTS_ENABLED`). Default true; false: fulfillment writes none, no topic is
    /// created, and what other writers record is marked handled unpublished (`OutboundRelay`).
    public var outboundEventsEnabled: Bool
    /// Events still RECEIVED after this long are re-published (`EVENT_STUCK_AFTER_SECONDS`). Default 60.
    public var stuckAfter: Duration
    /// Sweeper and relay period (`EVENT_SWEEP_INTERVAL_MS`). Default 1000.
    public var sweepInterval: Duration
    /// From SIGTERM to exit at most (`SHUTDOWN_GRACE_SECONDS`), whatever the broker does: in-flight
    /// requests and events finish, the producer flushes and the consumer leaves within it, and
    /// what could not be published stays in the outbox. Default 20; the orchestrator's grace
    /// (Kubernetes `terminationGracePeriodSeconds`, compose `stop_grace_period`) must exceed it.
    public var shutdownGrace: Duration
    /// Whether the service applies the schema migrations itself before serving
    /// (`MIGRATE_ON_START`). Default false: a deployment migrates in one place (`subsctl migrate`,
    /// run by the Kubernetes Job or compose's one-shot `migrate` service) and the services wait
    /// until the schema has every migration they carry, `/readyz` saying what they wait for
    /// (deploy/UPGRADING.md). True suits one machine where nothing else migrates.
    public var migrateOnStart: Bool
    /// `lock_timeout` of each migration when `migrateOnStart` (`MIGRATION_LOCK_TIMEOUT_MS`, 0: none). Default 10 s.
    public var migrationLockTimeout: Duration?
    /// `LOG_LEVEL`, validated here with every other setting (the logger reads it before any
    /// configuration exists). Default info.
    public var logLevel: LogLevel

    public init(reader: ConfigurationReader) {
        databaseURL = reader.requiredString("DATABASE_URL", expected: "a libpq URI, postgresql://user:pass@host:port/db")
        if !databaseURL.isEmpty, !(databaseURL.hasPrefix("postgresql://") || databaseURL.hasPrefix("postgres://")) {
            reader.report("DATABASE_URL", databaseURL, "a libpq URI, postgresql://user:pass@host:port/db")
        }
        databaseMaxConnections = reader.int("DATABASE_MAX_CONNECTIONS", default: 16, range: 1...500)
        kafkaBrokers = reader.hostPorts("KAFKA_BROKERS")
        // `KAFKA_PROPERTY_SASL_PASSWORD_FILE` and the like: the broker's secrets from files too.
        let (kafkaEnvironment, kafkaProblems) = ConfigurationReader.resolvingFiles(reader.environment) {
            $0.hasPrefix("KAFKA_PROPERTY_")
        }
        for problem in kafkaProblems { reader.report(problem.name, problem.value, problem.expected) }
        kafkaProperties = KafkaConfiguration.properties(fromEnvironment: kafkaEnvironment)
        eventTopic = reader.string("EVENT_TOPIC", default: "appstore.events.v1")
        if eventTopic.range(of: "^[A-Za-z0-9._-]{1,249}$", options: .regularExpression) == nil {
            reader.report("EVENT_TOPIC", eventTopic, "a Kafka topic name: letters, digits, '.', '_' or '-'")
        }
        eventTopicPartitions = reader.int("EVENT_TOPIC_PARTITIONS", default: 12, range: 1...10_000)
        eventTopicReplicationFactor = reader.int("EVENT_TOPIC_REPLICATION_FACTOR", default: 1, range: 1...100)
        eventTopicCreate = reader.bool("EVENT_TOPIC_CREATE", default: true)
        outboundEventTopic = reader.string("OUTBOUND_EVENT_TOPIC", default: "subscriptions.events.v1")
        if outboundEventTopic.range(of: "^[A-Za-z0-9._-]{1,249}$", options: .regularExpression) == nil {
            reader.report("OUTBOUND_EVENT_TOPIC", outboundEventTopic, "a Kafka topic name: letters, digits, '.', '_' or '-'")
        }
        outboundEventTopicPartitions = reader.int("OUTBOUND_EVENT_TOPIC_PARTITIONS", default: 12, range: 1...10_000)
        outboundEventsEnabled = reader.bool("OUTBOUND_EVENTS_ENABLED", default: true)
        stuckAfter = .seconds(reader.int("EVENT_STUCK_AFTER_SECONDS", default: 60, range: 1...86_400))
        sweepInterval = .milliseconds(reader.int("EVENT_SWEEP_INTERVAL_MS", default: 1000, range: 10...600_000))
        shutdownGrace = .seconds(reader.int("SHUTDOWN_GRACE_SECONDS", default: 20, range: 1...3600))
        migrateOnStart = reader.bool("MIGRATE_ON_START", default: false)
        migrationLockTimeout = Migrator.lockTimeout(reader: reader)
        logLevel = LogLevel(rawValue: reader.oneOf("LOG_LEVEL", LogLevel.allCases.map(\.rawValue), default: "info")) ?? .info
    }

    public var postgres: PostgresConfiguration {
        PostgresConfiguration(url: databaseURL, maximumConnections: databaseMaxConnections)
    }

    /// A delivery gives up after 30 s instead of librdkafka's 5 min: the outbox relay retries,
    /// so a request never waits on a dead broker. The operator's properties come last.
    /// The producer's share of the grace: how long a stopping process waits for the broker to
    /// acknowledge what is queued (a quarter, so the HTTP drain before it keeps the most).
    public var producerFlushTimeout: Duration { shutdownGrace / 4 }

    public var kafka: KafkaConfiguration {
        KafkaConfiguration(brokers: kafkaBrokers, deliveryTimeout: .seconds(30), properties: kafkaProperties)
    }
}
