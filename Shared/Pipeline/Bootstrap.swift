import Kafka
import Postgres
import ServiceRuntime
import Storage
import Synchronization

/// What every service does before serving: the schema (waited for until every migration the
/// binary carries is applied, or with `MIGRATE_ON_START` applied here under the advisory lock,
/// so instances may start together) and the event topic: created with its configured partitions
/// and replication factor (`EVENT_TOPIC_CREATE`), or only checked to exist.
public enum Bootstrap {
    /// Between two looks at `schema_migrations` while waiting for the schema.
    public static let schemaPollInterval = Duration.seconds(2)

    /// `schema` reports the wait to `/readyz` (the health listener is up before this is called, so
    /// the orchestrator's start-up probe passes while a long migration runs elsewhere).
    ///
    /// With `topicWait` the topic is not required: it is waited for that long, then left to the
    /// sweeper (`topicEnsurer`), so a process that can work without the broker (the ingress
    /// stores into the outbox) starts without it. Returns whether the topic is known to exist.
    @discardableResult
    public static func prepare(
        configuration: PipelineConfiguration, pool: PostgresPool, logger: Logger, topicWait: Duration? = nil,
        schema: SchemaGate = SchemaGate()
    ) async throws -> Bool {
        try await prepareSchema(configuration: configuration, pool: pool, logger: logger, gate: schema)
        guard let topicWait else {
            try await ensureTopic(configuration: configuration, logger: logger)
            logger.info("event topic ready", ["kafka.topic": .string(configuration.eventTopic)])
            return true
        }
        // The attempt may wait on a broker that is not there: it is not waited for past topicWait.
        let outcome = Locked<Bool?>(nil)
        let done = ShutdownTrigger()
        Task {
            let ready = await topicEnsurer(configuration: configuration, logger: logger)()
            outcome.withLock { $0 = ready }
            done.fire()
        }
        _ = await done.wait(timeout: topicWait)
        let ready = outcome.withLock { $0 } ?? false
        if ready {
            logger.info("event topic ready", ["kafka.topic": .string(configuration.eventTopic)])
        } else {
            logger.warning(
                "starting without the broker; events wait in the outbox until it answers",
                ["kafka.topic": .string(configuration.eventTopic)])
        }
        return ready
    }

    /// Migrates (`MIGRATE_ON_START`) or waits until every bundled migration is applied, keeping
    /// `gate` up to date; a database ahead of the binary is fine (additive migrations only,
    /// deploy/UPGRADING.md).
    public static func prepareSchema(
        configuration: PipelineConfiguration, pool: PostgresPool, logger: Logger, gate: SchemaGate,
        pollInterval: Duration = schemaPollInterval
    ) async throws {
        let bundled = try Migrator.bundled()
        let migrator = Migrator(pool: pool, logger: logger, lockTimeout: configuration.migrationLockTimeout)
        if configuration.migrateOnStart {
            gate.update("migrating")
            let applied = try await migrator.migrate(bundled)
            logger.info("schema ready", ["db.migrations_applied": .int(Int64(applied.count))])
            gate.update(nil)
            return
        }
        var logged: String?
        while true {
            let state = try await migrator.state(of: bundled)
            if state.isReady {
                logger.info(
                    "schema ready", ["db.schema_version": .int(Int64(state.current)), "db.schema_required": .int(Int64(state.required))])
                gate.update(nil)
                return
            }
            gate.update(state.description)
            if logged != state.description {
                logged = state.description
                logger.warning(
                    "waiting for the schema migrations (subsctl migrate, the set-up Job or compose's migrate service)",
                    ["db.schema": .string(state.description)])
            }
            try await Task.sleep(for: pollInterval)
        }
    }

    /// Creates the event topic if it is missing and creating is allowed (idempotent); returns its
    /// partition count. A count other than the configured one is a warning and a metric
    /// (`subs_event_topic_partitions` beside `subs_event_topic_partitions_configured`).
    /// The outbound topic (`OUTBOUND_EVENT_TOPIC`) is ensured the same way beside it, when
    /// outbound events are on.
    @discardableResult
    public static func ensureTopic(configuration: PipelineConfiguration, logger: Logger) async throws -> Int {
        let admin = KafkaAdmin(configuration: configuration.kafka, logger: logger)
        func ensure(_ topic: String, partitions: Int) async throws -> Int {
            if configuration.eventTopicCreate {
                return try await admin.createTopic(
                    topic, partitions: partitions, replicationFactor: configuration.eventTopicReplicationFactor)
            }
            guard let existing = try await admin.partitionCount(topic) else { throw TopicMissing(topic: topic) }
            return existing
        }
        if configuration.outboundEventsEnabled {
            _ = try await ensure(configuration.outboundEventTopic, partitions: configuration.outboundEventTopicPartitions)
        }
        let partitions = try await ensure(configuration.eventTopic, partitions: configuration.eventTopicPartitions)
        let labels = ["topic": configuration.eventTopic]
        MetricsRegistry.shared.gauge(
            "subs_event_topic_partitions", help: "Partitions of the event topic, as the broker reports them", labels: labels
        ).set(Double(partitions))
        MetricsRegistry.shared.gauge(
            "subs_event_topic_partitions_configured", help: "EVENT_TOPIC_PARTITIONS", labels: labels
        ).set(Double(configuration.eventTopicPartitions))
        if partitions != configuration.eventTopicPartitions {
            // Keys map to partitions by count: a mismatch would move chains between partitions.
            logger.warning(
                "event topic partition count differs from configuration",
                [
                    "kafka.topic": .string(configuration.eventTopic), "kafka.partitions": .int(Int64(partitions)),
                    "kafka.partitions_configured": .int(Int64(configuration.eventTopicPartitions)),
                ])
        }
        return partitions
    }

    /// The sweeper's hook: make sure the topic exists, logging instead of failing (at most once
    /// per throttle window while the broker stays away). True when it exists.
    public static func topicEnsurer(configuration: PipelineConfiguration, logger: Logger) -> @Sendable () async -> Bool {
        {
            do {
                try await ensureTopic(configuration: configuration, logger: logger)
                return true
            } catch {
                if let suppressed = LogThrottle.shared.admit("topic-ensure") {
                    logger.warning(
                        "event topic could not be ensured",
                        ["error": .string("\(error)"), "kafka.suppressed": .int(Int64(suppressed))])
                }
                return false
            }
        }
    }
}

/// `EVENT_TOPIC_CREATE=false` and the topic is not there: an operator must create it.
public struct TopicMissing: Error, CustomStringConvertible {
    public let topic: String
    public var description: String {
        "topic \(topic) does not exist and EVENT_TOPIC_CREATE=false: create it (EVENT_TOPIC_PARTITIONS or OUTBOUND_EVENT_TOPIC_PARTITIONS partitions) with the broker's tools"
    }
}

/// What `/readyz` says of the schema while a service starts: "ok" once it has every migration the
/// binary carries, else what it waits for (`waiting for 36, at 35`).
public final class SchemaGate: Sendable {
    private let waiting = Mutex<String?>("not checked yet")

    public init() {}

    /// A gate that is already open: for code that runs on a schema known to be current (tests
    /// of the routes, where no Bootstrap runs).
    public static var ready: SchemaGate {
        let gate = SchemaGate()
        gate.update(nil)
        return gate
    }

    /// Nil once ready, else why not.
    public var waitingFor: String? { waiting.withLock { $0 } }

    /// "ok" or the reason.
    public var status: String { waitingFor ?? "ok" }

    func update(_ reason: String?) { waiting.withLock { $0 = reason } }
}
