import Foundation
import Postgres
import ServiceRuntime
import Storage

/// A database of its own on the test PostgreSQL, migrated to the current schema, for one test.
public struct TestDatabase: Sendable {
    public let name: String
    /// libpq URI of this database.
    public let url: String
    public let pool: PostgresPool

    /// Creates and migrates a fresh database named after `prefix`.
    public static func make(_ prefix: String = "test") async throws -> TestDatabase {
        let serverURL = try TestEnvironment.databaseURL()
        let name = TestEnvironment.uniqueName(prefix)
        let admin = PostgresPool(
            configuration: TestEnvironment.poolConfiguration(url: serverURL, maximumConnections: 1), logger: Logger(label: "test"))
        // The name is generated, never input: safe to splice into DDL.
        try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"))
        await admin.shutdown()
        guard var components = URLComponents(string: serverURL) else { throw MissingServiceError(variable: "a parsable DATABASE_URL") }
        components.path = "/" + name
        let url = components.string ?? serverURL
        let logger = Logger(label: "test", level: .warning)
        let pool = PostgresPool(configuration: TestEnvironment.poolConfiguration(url: url, maximumConnections: 8), logger: logger)
        try await Migrator(pool: pool, logger: logger).migrate(Migrator.bundled())
        return TestDatabase(name: name, url: url, pool: pool)
    }

    /// Closes the pool. The database stays until `deploy/local/drop-test-databases.sh` (run by the
    /// test command before the tests): DROP DATABASE waits for an immediate checkpoint, which on a
    /// loaded two-core machine took up to a minute and pushed small suites past their time limits.
    public func close() async {
        await pool.shutdown()
    }

    /// The integer in the first column of the first row of `sql`.
    public func count(_ sql: String) async throws -> Int {
        try await pool.query(PostgresQuery(unsafeSQL: sql))[0].decode(0, as: Int.self)
    }
}
