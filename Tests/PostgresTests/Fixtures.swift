import Foundation
import Postgres
import ServiceRuntime
import Storage
import Synchronization
import TestSupport
import Testing

/// Shared helpers of the PostgreSQL tests.
enum Fixture {
    static let logger = Logger(label: "postgres-tests", level: .critical)

    /// The test database's URL with `search_path` set to `schema`.
    static func url(_ base: String, schema: String) -> String {
        base + (base.contains("?") ? "&" : "?") + "options=-csearch_path%3D\(schema)"
    }

    /// Runs `body` with a pool confined to a fresh schema of the test database, dropped afterwards.
    static func withSchema<R: Sendable>(
        maximumConnections: Int = 4, acquireTimeout: Duration = .seconds(120), statementCacheCapacity: Int = 256,
        _ body: (PostgresPool, _ url: String) async throws -> R
    ) async throws -> R {
        let base = try TestEnvironment.databaseURL()
        let schema = TestEnvironment.uniqueName("pgtest")
        let admin = PostgresPool(configuration: TestEnvironment.poolConfiguration(url: base, maximumConnections: 1), logger: logger)
        let url = url(base, schema: schema)
        return try await withResource(
            {
                try await admin.query("CREATE SCHEMA \(identifier: schema)")
                var configuration = TestEnvironment.poolConfiguration(url: url, maximumConnections: maximumConnections)
                configuration.acquireTimeout = acquireTimeout
                configuration.statementCacheCapacity = statementCacheCapacity
                return PostgresPool(configuration: configuration, logger: logger)
            },
            cleanUp: { pool in
                await pool.shutdown()
                _ = try? await admin.query("DROP SCHEMA \(identifier: schema) CASCADE")
                await admin.shutdown()
            }
        ) { pool in try await body(pool, url) }
    }

    /// Runs `body` on a fresh schema migrated to just before `version`, given the rows of `seed`
    /// (SQL), then migrated to the newest: how a migration's change of existing data is tested.
    static func acrossMigration<R: Sendable>(
        _ version: Int, seed: String, _ body: (PostgresPool) async throws -> R
    ) async throws -> R {
        try await withSchema { pool, _ in
            let all = try Migrator.bundled()
            let migrator = Migrator(pool: pool, logger: logger)
            try await migrator.migrate(all.filter { $0.version < version })
            try await pool.query(PostgresQuery(unsafeSQL: seed))
            try await migrator.migrate(all)
            return try await body(pool)
        }
    }

    /// Waits until `condition` holds (checking every 10 ms), failing after `seconds`: for states
    /// another session reaches, such as waiting on a lock. Never used to assert durations.
    static func waitUntil(
        _ what: String, seconds: Double = 20, _ condition: () async throws -> Bool
    ) async throws {
        guard try await eventually(timeout: seconds, every: .milliseconds(10), condition) else { throw TestTimeout(what: what) }
    }

    /// Runs `body`, failing instead of hanging if it does not finish within `seconds`.
    static func withDeadline<R: Sendable>(
        _ what: String, seconds: Double = 30, _ body: @escaping @Sendable () async throws -> R
    ) async throws -> R {
        try await withThrowingTaskGroup(of: R.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(for: .seconds(seconds))
                throw TestTimeout(what: what)
            }
            defer { group.cancelAll() }
            return try await group.next()!
        }
    }
}

/// A condition a test waited for never came.
struct TestTimeout: Error, CustomStringConvertible {
    let what: String
    var description: String { "gave up waiting: \(what)" }
}

/// An ordered record of what concurrent tasks did, to assert orderings without timings.
final class EventLog: Sendable {
    private let events = Mutex<[String]>([])
    func record(_ event: String) { events.withLock { $0.append(event) } }
    var all: [String] { events.withLock { $0 } }
}

/// A one-shot signal between tasks.
typealias Signal = ShutdownTrigger

extension PostgresError {
    var isConnectionFailure: Bool {
        if case .connectionFailed = self { true } else { false }
    }
    var isAcquireTimeout: Bool {
        if case .acquireTimeout = self { true } else { false }
    }
    var isPoolClosed: Bool {
        if case .poolClosed = self { true } else { false }
    }
}

/// A failure the tests throw on purpose.
struct Boom: Error {}
