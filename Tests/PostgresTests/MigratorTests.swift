import Foundation
import Postgres
import Storage
import TestSupport
import Testing

@Suite("Schema migrations")
struct MigratorTests {
    let migrations = [
        Migration(
            version: 1, name: "create_runs",
            sql: "CREATE TABLE runs (id serial PRIMARY KEY, migration int NOT NULL); INSERT INTO runs (migration) VALUES (1);"),
        Migration(version: 2, name: "add_note", sql: "ALTER TABLE runs ADD COLUMN note text; INSERT INTO runs (migration) VALUES (2);"),
        Migration(version: 3, name: "third", sql: "INSERT INTO runs (migration, note) VALUES (3, 'x');"),
    ]

    @Test func loadsNumberedFilesInOrder() throws {
        let directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent(TestEnvironment.uniqueName("migrations"))
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(at: directory) }
        func write(_ name: String, _ text: String) throws {
            try Data(text.utf8).write(to: directory.appendingPathComponent(name))
        }
        try write("0010_later.sql", "SELECT 10;")
        try write("0002_second_step.sql", "SELECT 2;")
        try write(".keep", "")
        try write("README.md", "not a migration")
        let loaded = try Migrator.load(from: directory)
        #expect(
            loaded == [
                Migration(version: 2, name: "second_step", sql: "SELECT 2;"), Migration(version: 10, name: "later", sql: "SELECT 10;"),
            ])

        try write("10_again.sql", "SELECT 10;")
        #expect {
            try Migrator.load(from: directory)
        } throws: { error in
            if case MigrationError.duplicateVersion(10) = error { true } else { false }
        }
        try FileManager.default.removeItem(at: directory.appendingPathComponent("10_again.sql"))
        try write("v3_bad.sql", "SELECT 3;")
        #expect {
            try Migrator.load(from: directory)
        } throws: { error in
            if case MigrationError.invalidFileName("v3_bad.sql") = error { true } else { false }
        }
    }

    @Test func appliesEachMigrationOnce() async throws {
        try await Fixture.withSchema { pool, _ in
            let migrator = Migrator(pool: pool, logger: Fixture.logger)
            #expect(try await migrator.migrate(Array(migrations.prefix(2))) == [1, 2])
            #expect(try await migrator.migrate(Array(migrations.prefix(2))) == [])
            #expect(try await migrator.migrate(migrations) == [3])
            let runs = try await pool.query("SELECT migration FROM runs ORDER BY id").map { try $0.decode(0, as: Int.self) }
            #expect(runs == [1, 2, 3])
            let recorded = try await pool.query(
                "SELECT version, name, checksum = md5(\(migrations[0].sql)) AS same FROM schema_migrations ORDER BY version")
            #expect(try recorded.map { try $0.decode("version", as: Int.self) } == [1, 2, 3])
            #expect(try recorded.map { try $0.decode("name", as: String.self) } == ["create_runs", "add_note", "third"])
            #expect(try recorded.first!.decode("same", as: Bool.self))
        }
    }

    @Test func concurrentRunsApplyEachMigrationExactlyOnce() async throws {
        try await Fixture.withSchema { pool, url in
            let pools =
                [pool]
                + (1..<4).map { _ in
                    PostgresPool(configuration: TestEnvironment.poolConfiguration(url: url, maximumConnections: 2), logger: Fixture.logger)
                }
            let results = try await withThrowingTaskGroup(of: [Int].self) { group in
                for pool in pools {
                    group.addTask { [migrations] in
                        try await Migrator(pool: pool, logger: Fixture.logger).migrate(migrations)
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            for extra in pools.dropFirst() { await extra.shutdown() }
            #expect(results.flatMap { $0 }.sorted() == [1, 2, 3])
            #expect(try await pool.query("SELECT count(*) AS n FROM runs").first!.decode("n", as: Int.self) == 3)
        }
    }

    @Test func changedMigrationIsRejected() async throws {
        try await Fixture.withSchema { pool, _ in
            let migrator = Migrator(pool: pool, logger: Fixture.logger)
            try await migrator.migrate(migrations)
            var edited = migrations
            edited[1] = Migration(version: 2, name: "add_note", sql: migrations[1].sql + " -- edited")
            await #expect {
                try await migrator.migrate(edited)
            } throws: { error in
                if case MigrationError.checksumMismatch(version: 2, name: "add_note") = error { true } else { false }
            }
        }
    }

    @Test func failedMigrationLeavesNoTrace() async throws {
        try await Fixture.withSchema { pool, _ in
            let migrator = Migrator(pool: pool, logger: Fixture.logger)
            let broken = Migration(version: 4, name: "broken", sql: "CREATE TABLE half (id int); SELECT no_such_column FROM runs;")
            await #expect {
                try await migrator.migrate(migrations + [broken])
            } throws: { error in
                if case MigrationError.failed(version: 4, name: "broken", underlying: let underlying) = error {
                    underlying.sqlState == "42703"
                } else {
                    false
                }
            }
            let tables = try await pool.query("SELECT to_regclass('half') IS NULL AS absent").first!
            #expect(try tables.decode("absent", as: Bool.self))
            #expect(try await pool.query("SELECT version FROM schema_migrations").count == 3)
            // The advisory lock was released: another run can proceed.
            #expect(try await migrator.migrate(migrations) == [])
        }
    }

    @Test func bundledMigrationsApplyToAFreshSchema() async throws {
        try await Fixture.withSchema { pool, _ in
            let bundled = try Migrator.bundled()
            let migrator = Migrator(pool: pool, logger: Fixture.logger)
            #expect(try await migrator.migrate(bundled) == bundled.map(\.version))
            #expect(try await migrator.migrate(bundled) == [])
        }
    }

    /// A migration queued behind another session's lock gives up after the lock timeout instead of
    /// holding every later query on the table behind it; nothing of it stays, and it applies once
    /// the lock is gone.
    @Test func aMigrationBlockedOnALockGivesUpAfterTheLockTimeout() async throws {
        try await Fixture.withSchema { pool, url in
            try await Migrator(pool: pool, logger: Fixture.logger).migrate(migrations)
            let alter = Migration(version: 4, name: "alter_runs", sql: "ALTER TABLE runs ADD COLUMN later int;")
            let migrator = Migrator(pool: pool, logger: Fixture.logger, lockTimeout: .milliseconds(200))
            let holder = PostgresPool(configuration: TestEnvironment.poolConfiguration(url: url, maximumConnections: 1), logger: Fixture.logger)
            try await withResource({ holder }, cleanUp: { await $0.shutdown() }) { holder in
                try await holder.withConnection { connection in
                    try await connection.transaction { connection in
                        // A reader's open transaction, as a long report would hold it.
                        try await connection.query("LOCK TABLE runs IN ACCESS SHARE MODE")
                        await #expect {
                            try await migrator.migrate(migrations + [alter])
                        } throws: { error in
                            if case MigrationError.lockTimeout(version: 4, name: "alter_runs", milliseconds: 200) = error { true } else { false }
                        }
                    }
                }
            }
            let state = try await migrator.state(of: migrations + [alter])
            #expect(state == SchemaState(required: 4, current: 3, missing: [4]))
            #expect(state.description == "waiting for 4, at 3")
            #expect(try await migrator.migrate(migrations + [alter]) == [4])
            #expect(try await migrator.state(of: migrations + [alter]).isReady)
        }
    }

    /// What a service that does not migrate reads: nothing on an empty schema, the gaps otherwise;
    /// a schema ahead of the migrations it knows is ready.
    @Test func stateReportsWhatIsMissing() async throws {
        try await Fixture.withSchema { pool, _ in
            let migrator = Migrator(pool: pool, logger: Fixture.logger)
            #expect(try await migrator.state(of: migrations) == SchemaState(required: 3, current: 0, missing: [1, 2, 3]))
            #expect(try await migrator.state(of: migrations).description == "waiting for 3, at 0")
            try await migrator.migrate(Array(migrations.prefix(1)))
            #expect(try await migrator.state(of: migrations).description == "waiting for 3, at 1")
            try await migrator.migrate(migrations)
            #expect(try await migrator.state(of: Array(migrations.prefix(2))).isReady)
            #expect(try await migrator.state(of: migrations).description == "ok")
        }
    }
}
