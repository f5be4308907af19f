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
        let admin = KafkaAdmin(configuration: configuration.kafka, logger: logger)
        let partitions = try await admin.createTopic(
            configuration.eventTopic, partitions: configuration.eventTopicPartitions)
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
}
