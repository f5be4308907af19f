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

    public var description: String {
        switch self {
        case .invalidFileName(let file): "migration file \(file) is not named NNNN_name.sql"
        case .duplicateVersion(let version): "several migrations have version \(version)"
        case .missingResources: "the bundled Migrations folder is missing"
        case .checksumMismatch(let version, let name):
            "migration \(version) (\(name)) was changed after being applied"
        case .failed(let version, let name, let underlying): "migration \(version) (\(name)) failed: \(underlying)"
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
public struct Migrator: Sendable {
    private let pool: PostgresPool
    private let logger: Logger

    /// First half of the two-integer advisory lock key ("MIGR"); that key space never overlaps
    /// the single bigint keys applications usually pick.
    private static let lockClass: Int32 = 0x4D49_4752

    public init(pool: PostgresPool, logger: Logger) {
        self.pool = pool
        self.logger = logger
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
        for migration in migrations where !done.contains(migration.version) {
            let metadata: Logger.Metadata = [
                "migration.version": .int(Int64(migration.version)), "migration.name": .string(migration.name),
            ]
            logger.info("applying migration", metadata)
            do {
                try await connection.transaction { connection in
                    try await connection.query(PostgresQuery(unsafeSQL: migration.sql))
                    try await connection.query(
                        """
                        INSERT INTO schema_migrations (version, name, checksum)
                        VALUES (\(migration.version), \(migration.name), md5(\(migration.sql)))
                        """)
                }
            } catch let error as PostgresError {
                logger.error("migration failed", metadata.merging(["error": .string("\(error)")]) { $1 })
                throw MigrationError.failed(version: migration.version, name: migration.name, underlying: error)
            }
            applied.append(migration.version)
        }
        return applied
    }

    private static func ordered(_ migrations: [Migration]) throws -> [Migration] {
        let sorted = migrations.sorted { $0.version < $1.version }
        for (previous, next) in zip(sorted, sorted.dropFirst()) where previous.version == next.version {
            throw MigrationError.duplicateVersion(next.version)
        }
        return sorted
    }
}
