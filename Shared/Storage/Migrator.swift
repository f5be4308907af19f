import Foundation
import Postgres
import ServiceRuntime

/// One schema change: the SQL of a numbered file `NNNN_name.sql`.
public struct Migration: Sendable, Equatable {
    public let version: Int
    public let name: String
    public let sql: String

    public init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
    }
}

/// Why migrations could not be loaded or applied.
public enum MigrationError: Error, Sendable, CustomStringConvertible {
    /// A `.sql` file whose name is not `NNNN_name.sql`.
    case invalidFileName(String)
    case duplicateVersion(Int)
    case missingResources
    /// An applied migration whose SQL has changed since: the database no longer matches the files.
    case checksumMismatch(version: Int, name: String)
    /// A migration's SQL failed; its transaction was rolled back.
    case failed(version: Int, name: String, underlying: PostgresError)
    /// A migration waited longer than the lock timeout for a table lock (other transactions held
    /// it); rolled back, nothing applied: run again when the database is quieter.
    case lockTimeout(version: Int, name: String, milliseconds: Int)

    public var description: String {
        switch self {
        case .invalidFileName(let file): "migration file \(file) is not named NNNN_name.sql"
        case .duplicateVersion(let version): "several migrations have version \(version)"
        case .missingResources: "the bundled Migrations folder is missing"
        case .checksumMismatch(let version, let name):
            "migration \(version) (\(name)) was changed after being applied"
        case .failed(let version, let name, let underlying): "migration \(version) (\(name)) failed: \(underlying)"
        case .lockTimeout(let version, let name, let milliseconds):
            "migration \(version) (\(name)) waited over \(milliseconds) ms for a lock (MIGRATION_LOCK_TIMEOUT_MS) and was rolled back; run it again"
        }
    }
}

/// Brings the database schema up to date, safely when several instances start at once.
///
/// Everything happens on one connection holding a session advisory lock (keyed by the current
/// schema), so concurrent runs queue up and the later ones find the work done. Each migration
/// runs in its own transaction together with its row in `schema_migrations`, so it is applied
/// entirely or not at all; its SQL must therefore not contain BEGIN/COMMIT nor statements
/// that refuse transactions (`CREATE INDEX CONCURRENTLY`).
///
/// Each migration runs under `lock_timeout`: a DDL statement queued behind a long transaction
/// would otherwise hold every later query on that table in the queue behind it (intake stops);
/// with the timeout it gives up, is rolled back and the run fails with `lockTimeout`, to be run
/// again. Every migration logs its start and its duration.
public struct Migrator: Sendable {
    private let pool: PostgresPool
    private let logger: Logger
    /// `lock_timeout` of each migration's transaction (`MIGRATION_LOCK_TIMEOUT_MS`); nil: the server's.
    private let lockTimeout: Duration?
    /// `MIGRATION_LOCK_TIMEOUT_MS`'s default: long enough for a busy table between two short
    /// transactions, short enough that a blocked intake recovers in seconds.
    public static let defaultLockTimeout = Duration.seconds(10)

    /// First half of the two-integer advisory lock key ("MIGR"); that key space never overlaps
    /// the single bigint keys applications usually pick.
    private static let lockClass: Int32 = 0x4D49_4752

    public init(pool: PostgresPool, logger: Logger, lockTimeout: Duration? = Migrator.defaultLockTimeout) {
        self.pool = pool
        self.logger = logger
        self.lockTimeout = lockTimeout
    }

    /// `MIGRATION_LOCK_TIMEOUT_MS` (0: no timeout; default 10000).
    public static func lockTimeout(reader: ConfigurationReader) -> Duration? {
        let milliseconds = reader.int(
            "MIGRATION_LOCK_TIMEOUT_MS", default: Int(defaultLockTimeout.components.seconds) * 1000, range: 0...3_600_000)
        return milliseconds == 0 ? nil : .milliseconds(milliseconds)
    }

    /// Reads the `NNNN_name.sql` files of a folder, ordered by number; other files are ignored.
    public static func load(from directory: URL) throws -> [Migration] {
        let files = try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
        var migrations: [Migration] = []
        for file in files where file.pathExtension == "sql" {
            let base = file.deletingPathExtension().lastPathComponent
            guard let underscore = base.firstIndex(of: "_"), underscore != base.startIndex,
                base[..<underscore].allSatisfy(\.isASCII), base[..<underscore].allSatisfy(\.isNumber),
                let version = Int(base[..<underscore]), base.index(after: underscore) != base.endIndex
            else { throw MigrationError.invalidFileName(file.lastPathComponent) }
            let sql = try String(contentsOf: file, encoding: .utf8)
            migrations.append(Migration(version: version, name: String(base[base.index(after: underscore)...]), sql: sql))
        }
        return try ordered(migrations)
    }

    /// The migrations shipped in this module's `Migrations` folder.
    public static func bundled() throws -> [Migration] {
        guard let directory = Bundle.module.url(forResource: "Migrations", withExtension: nil) else {
            throw MigrationError.missingResources
        }
        return try load(from: directory)
    }

    /// Applies the migrations not applied yet, in version order; returns their versions.
    @discardableResult
    public func migrate(_ migrations: [Migration]) async throws -> [Int] {
        let migrations = try Self.ordered(migrations)
        return try await pool.withConnection { connection in
            let key: Int32 = try await connection.query(
                "SELECT hashtext(coalesce(current_schema(), '')) AS key"
            ).single().decode("key")
            try await connection.query("SELECT pg_advisory_lock(\(Self.lockClass), \(key))")
            do {
                let applied = try await apply(migrations, on: connection)
                try await connection.query("SELECT pg_advisory_unlock(\(Self.lockClass), \(key))")
                return applied
            } catch {
                // A broken connection has lost the lock with its session anyway.
                _ = try? await connection.query("SELECT pg_advisory_unlock(\(Self.lockClass), \(key))")
                throw error
            }
        }
    }

    /// Under the lock.
    private func apply(_ migrations: [Migration], on connection: PostgresConnection) async throws -> [Int] {
        try await connection.query(
            PostgresQuery(
                unsafeSQL: """
                    CREATE TABLE IF NOT EXISTS schema_migrations (
                        version bigint PRIMARY KEY,
                        name text NOT NULL,
                        checksum text NOT NULL,
                        applied_at timestamptz NOT NULL DEFAULT now())
                    """))
        // The server computes the checksums (md5 of the SQL), so no hashing code is needed here.
        let changed = try await connection.query(
            """
            SELECT m.version, m.name FROM schema_migrations m
            JOIN unnest(\(PostgresArray(migrations.map(\.version))), \(PostgresArray(migrations.map(\.sql))))
                AS f(version, sql) USING (version)
            WHERE m.checksum <> md5(f.sql) ORDER BY m.version
            """)
        if let first = changed.first {
            throw MigrationError.checksumMismatch(version: try first.decode("version"), name: try first.decode("name"))
        }
        let done = Set(
            try await connection.query("SELECT version FROM schema_migrations").map { try $0.decode("version", as: Int.self) })
        var applied: [Int] = []
        let pending = migrations.filter { !done.contains($0.version) }
        if !pending.isEmpty {
            logger.info(
                "migrations to apply",
                [
                    "migration.count": .int(Int64(pending.count)),
                    "migration.versions": .string(pending.map { String($0.version) }.joined(separator: ",")),
                ])
        }
        let timeoutMilliseconds = lockTimeout.map { Int($0.components.seconds * 1000 + $0.components.attoseconds / 1_000_000_000_000_000) }
        for (index, migration) in pending.enumerated() {
            var metadata: Logger.Metadata = [
                "migration.version": .int(Int64(migration.version)), "migration.name": .string(migration.name),
                "migration.step": .string("\(index + 1)/\(pending.count)"),
            ]
            logger.info("applying migration", metadata)
            let started = ContinuousClock.now
            do {
                try await connection.transaction { connection in
                    if let timeoutMilliseconds {
                        // An integer of ours, not input: SET takes no bind parameters.
                        try await connection.query(PostgresQuery(unsafeSQL: "SET LOCAL lock_timeout = \(timeoutMilliseconds)"))
                    }
                    try await connection.query(PostgresQuery(unsafeSQL: migration.sql))
                    try await connection.query(
                        """
                        INSERT INTO schema_migrations (version, name, checksum)
                        VALUES (\(migration.version), \(migration.name), md5(\(migration.sql)))
                        """)
                }
            } catch let error as PostgresError {
                logger.error("migration failed", metadata.merging(["error": .string("\(error)")]) { $1 })
                if error.sqlState == "55P03", let timeoutMilliseconds {
                    throw MigrationError.lockTimeout(version: migration.version, name: migration.name, milliseconds: timeoutMilliseconds)
                }
                throw MigrationError.failed(version: migration.version, name: migration.name, underlying: error)
            }
            let elapsed = ContinuousClock.now - started
            metadata["migration.duration_ms"] = .int(
                Int64(elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000))
            logger.info("migration applied", metadata)
            applied.append(migration.version)
        }
        return applied
    }

    /// The versions of `migrations` applied to the database and the highest applied at all,
    /// without taking the lock or creating anything: what a service that does not migrate checks.
    public func state(of migrations: [Migration]) async throws -> SchemaState {
        let present: Bool = try await pool.query(
            "SELECT to_regclass('schema_migrations') IS NOT NULL AS present"
        ).single().decode("present")
        let applied =
            present
            ? try await pool.query("SELECT version FROM schema_migrations").map { try $0.decode("version", as: Int.self) } : []
        let set = Set(applied)
        return SchemaState(
            required: migrations.map(\.version).max() ?? 0, current: applied.max() ?? 0,
            missing: migrations.map(\.version).filter { !set.contains($0) }.sorted())
    }

    private static func ordered(_ migrations: [Migration]) throws -> [Migration] {
        let sorted = migrations.sorted { $0.version < $1.version }
        for (previous, next) in zip(sorted, sorted.dropFirst()) where previous.version == next.version {
            throw MigrationError.duplicateVersion(next.version)
        }
        return sorted
    }
}

/// Where a database's schema stands against the migrations a binary carries.
public struct SchemaState: Sendable, Equatable, CustomStringConvertible {
    /// The highest version the binary carries: the schema it needs.
    public let required: Int
    /// The highest version applied (0 on an empty database).
    public let current: Int
    /// Versions the binary carries that the database lacks.
    public let missing: [Int]

    public init(required: Int, current: Int, missing: [Int]) {
        self.required = required
        self.current = current
        self.missing = missing
    }

    /// Every migration the binary knows is applied; the database may be ahead (a newer release's
    /// additive migrations, see deploy/UPGRADING.md).
    public var isReady: Bool { missing.isEmpty }

    /// "ok", or what is awaited: `waiting for 36, at 35`.
    public var description: String {
        if isReady { return "ok" }
        let gaps =
            missing.count == 1 || missing.last == required && missing.first! > current
            ? "" : " (missing \(missing.map(String.init).joined(separator: ",")))"
        return "waiting for \(required), at \(current)\(gaps)"
    }
}
