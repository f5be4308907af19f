import Foundation
import Kafka
import Postgres

/// Why an integration test could not run: a service the test command should have started is absent.
public struct MissingServiceError: Error, CustomStringConvertible {
    public let variable: String
    public init(variable: String) { self.variable = variable }
    public var description: String {
        "\(variable) is not set: integration tests need the local services; run them through "
            + "deploy/local/test.sh (or source deploy/local/env.sh after deploy/local/start.sh)"
    }
}

/// Connection settings of the real PostgreSQL and broker that integration tests use.
///
/// A missing setting throws, so the test fails loudly instead of silently passing.
public enum TestEnvironment {
    public static func require(_ name: String) throws -> String {
        guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else {
            throw MissingServiceError(variable: name)
        }
        return value
    }

    /// libpq URI of the test database (`DATABASE_URL`).
    public static func databaseURL() throws -> String { try require("DATABASE_URL") }

    /// Pool settings for tests, which check outcomes, not latency: on a loaded two-core CI machine
    /// the shared cluster once took longer than the 5 s production defaults to accept a
    /// connection (CI, 2026-12-05) and 50 callers serialised on one row outlasted the acquire wait.
    public static func poolConfiguration(url: String, maximumConnections: Int) -> PostgresConfiguration {
        PostgresConfiguration(
            url: url, maximumConnections: maximumConnections, acquireTimeout: .seconds(120), connectTimeout: .seconds(60))
    }

    /// Bootstrap servers of the test broker (`KAFKA_BROKERS`).
    public static func kafkaBrokers() throws -> String { try require("KAFKA_BROKERS") }

    /// The test broker's librdkafka tuning: the `KAFKA_PROPERTY_*` of the test environment
    /// (deploy/local/env.sh sets the local Tansu's), as the services read them.
    public static var kafkaProperties: [String: String] {
        KafkaConfiguration.properties(fromEnvironment: ProcessInfo.processInfo.environment)
    }

    /// A client configuration for the test broker (or `brokers`) with the test environment's
    /// tuning, then `properties` on top: in-process clients get what the service processes get.
    public static func kafkaConfiguration(brokers: String? = nil, properties: [String: String] = [:]) throws
        -> KafkaConfiguration
    {
        KafkaConfiguration(
            brokers: try brokers ?? kafkaBrokers(), properties: kafkaProperties.merging(properties) { _, own in own })
    }

    /// A name no other test (or earlier run) uses: for topics, groups, schemas.
    public static func uniqueName(_ prefix: String) -> String {
        "\(prefix)_\(UInt32(getpid()))_\(UUID().uuidString.prefix(8).lowercased())"
    }
}
