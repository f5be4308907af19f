import Foundation
import IngressApp
import Kafka
import Pipeline
import Postgres
import ServiceRuntime
import Storage
import TestSupport

/// A private slice of the real services for one end-to-end test: its own database, topic and
/// consumer group, so tests never see each other's events.
struct PipelineHarness {
    let databaseURL: String
    let topic: String
    let groupID: String
    let partitions: Int
    let logger = Logger(label: "e2e", level: .warning)

    static func make(partitions: Int = 6) async throws -> PipelineHarness {
        let baseURL = try TestEnvironment.databaseURL()
        _ = try TestEnvironment.kafkaBrokers()
        let database = TestEnvironment.uniqueName("e2e")
        let admin = PostgresPool(configuration: PostgresConfiguration(url: baseURL, maximumConnections: 1), logger: Logger(label: "e2e"))
        // The name is generated above, never input: safe to splice into DDL.
        try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(database)"))
        await admin.shutdown()
        return PipelineHarness(
            databaseURL: Self.replacingDatabase(in: baseURL, with: database), topic: TestEnvironment.uniqueName("events"),
            groupID: TestEnvironment.uniqueName("group"), partitions: partitions)
    }

    static func replacingDatabase(in url: String, with database: String) -> String {
        var components = URLComponents(string: url)!
        components.path = "/" + database
        return components.string!
    }

    /// Environment of a service process attached to this slice.
    var serviceEnvironment: [String: String] {
        [
            "DATABASE_URL": databaseURL,
            "EVENT_TOPIC": topic,
            "EVENT_TOPIC_PARTITIONS": String(partitions),
            "FULFILLMENT_GROUP_ID": groupID,
            "FULFILLMENT_LEASE_SECONDS": "3",
            "EVENT_SWEEP_INTERVAL_MS": "500",
            "EVENT_STUCK_AFTER_SECONDS": "5",
            "KAFKA_PROPERTY_SESSION_TIMEOUT_MS": "2000",
            "KAFKA_PROPERTY_HEARTBEAT_INTERVAL_MS": "500",
            "LOG_LEVEL": "info",
        ]
    }

    var configuration: PipelineConfiguration {
        get throws {
            let reader = ConfigurationReader(
                environment: ProcessInfo.processInfo.environment.merging(serviceEnvironment) { _, new in new })
            let configuration = PipelineConfiguration(reader: reader)
            try reader.validate()
            return configuration
        }
    }

    func startWorker(_ name: String) throws -> ServiceProcess {
        try ServiceProcess(
            executable: "fulfillment", name: name, environment: serviceEnvironment.merging(["WORKER_ID": name]) { _, n in n })
    }
}
