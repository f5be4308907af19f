import Kafka
import Postgres
import ServiceRuntime
import Storage

/// What every service does before serving: schema migrations (under the advisory lock, so
/// instances may start together) and the event topic: created with its configured partitions and
/// replication factor (`EVENT_TOPIC_CREATE`), or only checked to exist.
public enum Bootstrap {
    ///
    /// With `topicWait` the topic is not required: it is waited for that long, then left to the
    /// sweeper (`topicEnsurer`), so a process that can work without the broker (the ingress
    /// stores into the outbox) starts without it. Returns whether the topic is known to exist.
    @discardableResult
    public static func prepare(
        configuration: PipelineConfiguration, pool: PostgresPool, logger: Logger, topicWait: Duration? = nil
    ) async throws -> Bool {
        let applied = try await Migrator(pool: pool, logger: logger).migrate(Migrator.bundled())
        logger.info("schema ready", ["db.migrations_applied": .int(Int64(applied.count))])
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
