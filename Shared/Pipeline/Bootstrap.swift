import Kafka
import Postgres
import ServiceRuntime
import Storage

/// What every service does before serving: schema migrations (under the advisory lock, so
/// instances may start together) and the event topic with its configured partition count.
public enum Bootstrap {
    public static func prepare(
        configuration: PipelineConfiguration, pool: PostgresPool, logger: Logger
    ) async throws {
        let applied = try await Migrator(pool: pool, logger: logger).migrate(Migrator.bundled())
        logger.info("schema ready", ["db.migrations_applied": .int(Int64(applied.count))])
        let partitions = try await ensureTopic(configuration: configuration, logger: logger)
        if partitions != configuration.eventTopicPartitions {
            // Keys map to partitions by count: a mismatch would move chains between partitions.
            logger.warning(
                "event topic partition count differs from configuration",
                [
                    "kafka.topic": .string(configuration.eventTopic), "kafka.partitions": .int(Int64(partitions)),
                    "kafka.partitions_configured": .int(Int64(configuration.eventTopicPartitions)),
                ])
        }
        logger.info("event topic ready", ["kafka.topic": .string(configuration.eventTopic)])
    }

    /// Creates the event topic if it is missing (idempotent); returns its partition count.
    @discardableResult
    public static func ensureTopic(configuration: PipelineConfiguration, logger: Logger) async throws -> Int {
        try await KafkaAdmin(configuration: configuration.kafka, logger: logger)
            .createTopic(configuration.eventTopic, partitions: configuration.eventTopicPartitions)
    }

    /// The sweeper's hook: make sure the topic exists, logging instead of failing.
    public static func topicEnsurer(configuration: PipelineConfiguration, logger: Logger) -> @Sendable () async -> Void {
        {
            do {
                try await ensureTopic(configuration: configuration, logger: logger)
            } catch {
                logger.warning("event topic could not be ensured", ["error": .string("\(error)")])
            }
        }
    }
}
