import Foundation
import Postgres
import ServiceRuntime
import TestSupport
import Testing

@Suite("PostgreSQL pool, statements and transactions")
struct PostgresPoolTests {
    @Test func uniqueViolationCarriesConstraintNameAndHidesData() async throws {
        try await Fixture.withSchema { pool, _ in
            try await pool.query(
                "CREATE TABLE account (id int PRIMARY KEY, email text CONSTRAINT account_email_key UNIQUE)")
            try await pool.query("INSERT INTO account VALUES (1, \("a@example.com"))")
            let error = await #expect(throws: PostgresError.self) {
                try await pool.query("INSERT INTO account VALUES (2, \("a@example.com"))")
            }
            guard case .uniqueViolation(let constraint, let detail)? = error else {
                Issue.record("expected a unique violation, got \(String(describing: error))")
                return
            }
            #expect(constraint == "account_email_key")
            #expect(detail.contains("already exists"))
            #expect(error?.sqlState == "23505")
            #expect(error?.isRetryable == false)
            #expect(!"\(error!)".contains("a@example.com"))
            #expect(String(reflecting: error!).contains("a@example.com"))
        }
    }

    @Test func otherServerErrorsCarrySQLState() async throws {
        try await Fixture.withSchema { pool, _ in
            try await pool.query("CREATE TABLE item (id int CONSTRAINT item_id_positive CHECK (id > 0))")
            let check = await #expect(throws: PostgresError.self) { try await pool.query("INSERT INTO item VALUES (-1)") }
            guard case .server(let sqlState, _, let constraint)? = check else {
                Issue.record("expected a server error, got \(String(describing: check))")
                return
            }
            #expect(sqlState == "23514")
            #expect(constraint == "item_id_positive")
            let syntax = await #expect(throws: PostgresError.self) { try await pool.query("SELEC 1") }
            #expect(syntax?.sqlState == "42601")
            // The failures left the connection usable.
            #expect(try await pool.query("SELECT 1 AS one").first?.decode("one", as: Int.self) == 1)
        }
    }

    @Test func transactionCommitsOrRollsBack() async throws {
        try await Fixture.withSchema { pool, _ in
            try await pool.query("CREATE TABLE entry (id int PRIMARY KEY)")
            await #expect(throws: Boom.self) {
                try await pool.transaction { connection in
                    try await connection.query("INSERT INTO entry VALUES (1)")
                    throw Boom()
                }
            }
            #expect(try await pool.query("SELECT id FROM entry").count == 0)

            let returned = try await pool.transaction { connection in
                try await connection.query("INSERT INTO entry VALUES (2)")
                return "done"
            }
            #expect(returned == "done")
            #expect(try await pool.query("SELECT id FROM entry").map { try $0.decode("id", as: Int.self) } == [2])

            // A failed statement whose error the body swallows must not end in a silent rollback.
            let error = await #expect(throws: PostgresError.self) {
                try await pool.transaction { connection in
                    try await connection.query("INSERT INTO entry VALUES (3)")
                    _ = try? await connection.query("INSERT INTO entry VALUES (2)")
                }
            }
            #expect(error?.sqlState == "25P02")
            #expect(try await pool.query("SELECT id FROM entry").count == 1)

            // Nested transactions are refused rather than committing the outer one early.
            let nested = await #expect(throws: PostgresError.self) {
                try await pool.transaction { connection in
                    try await connection.transaction { _ in }
                }
            }
            #expect(nested?.sqlState == "25001")
        }
    }

    /// The options travel with BEGIN and end with the transaction: the next user of the
    /// connection plans and writes as before.
    @Test func readOnlyAndGenericPlansLastOneTransaction() async throws {
        try await Fixture.withSchema(maximumConnections: 1) { pool, _ in
            try await pool.query("CREATE TABLE entry (id int PRIMARY KEY)")
            func settings(_ connection: PostgresConnection) async throws -> [String] {
                try await connection.query(
                    "SELECT current_setting('plan_cache_mode') AS plans, current_setting('transaction_read_only') AS ro"
                ).map { "\(try $0.decode("plans", as: String.self)) \(try $0.decode("ro", as: String.self))" }
            }
            let inside = try await pool.transaction(readOnly: true, genericPlans: true) { try await settings($0) }
            #expect(inside == ["force_generic_plan on"])
            let refused = await #expect(throws: PostgresError.self) {
                try await pool.transaction(readOnly: true) { try await $0.query("INSERT INTO entry VALUES (1)") }
            }
            #expect(refused?.sqlState == "25006")
            let after = try await pool.transaction { try await settings($0) }
            #expect(after == ["auto off"])
            try await pool.transaction(genericPlans: true) { try await $0.query("INSERT INTO entry VALUES (\(2))") }
            #expect(try await pool.query("SELECT count(*) AS n FROM entry").first?.decode("n", as: Int.self) == 1)
        }
    }

    @Test func selectForUpdateMakesTheSecondTransactionWait() async throws {
        try await Fixture.withSchema { pool, _ in
            try await pool.query("CREATE TABLE counter (id int PRIMARY KEY, value int NOT NULL)")
            try await pool.query("INSERT INTO counter VALUES (1, 0)")
            let log = EventLog()
            let firstLocked = Signal()
            let secondBlocked = Signal()
            let secondPID = Locked<Int32?>(nil)

            async let first: Void = pool.transaction { connection in
                try await connection.query("SELECT value FROM counter WHERE id = 1 FOR UPDATE")
                log.record("first locked")
                firstLocked.fire()
                await secondBlocked.wait()
                try await connection.query("UPDATE counter SET value = value + 1 WHERE id = 1")
                log.record("first commits")
            }
            await firstLocked.wait()
            async let second: Int32 = pool.transaction { connection in
                let pid: Int32 = try await connection.query("SELECT pg_backend_pid() AS pid").first!.decode("pid")
                secondPID.withLock { $0 = pid }
                log.record("second asks")
                let value: Int32 = try await connection.query(
                    "SELECT value FROM counter WHERE id = 1 FOR UPDATE"
                ).first!.decode("value")
                log.record("second locked")
                return value
            }
            // The server itself reports the second session waiting for the row lock.
            try await Fixture.waitUntil("second transaction waiting for the row lock") {
                guard let pid = secondPID.value else { return false }
                return try await pool.query(
                    "SELECT 1 FROM pg_locks WHERE pid = \(pid) AND NOT granted"
                ).count > 0
            }
            secondBlocked.fire()
            try await first
            let seen = try await second
            #expect(log.all == ["first locked", "second asks", "first commits", "second locked"])
            #expect(seen == 1)
        }
    }

    @Test func exhaustedPoolTimesOut() async throws {
        try await Fixture.withSchema(maximumConnections: 1, acquireTimeout: .milliseconds(200)) { pool, _ in
            try await pool.withConnection { _ in
                let error = await #expect(throws: PostgresError.self) { try await pool.query("SELECT 1") }
                #expect(error?.isAcquireTimeout == true)
                #expect(error?.isRetryable == true)
                #expect(pool.statistics.waiting == 0)
            }
            try await pool.query("SELECT 1")
            #expect(pool.statistics == PostgresPoolStatistics(open: 1, idle: 1, waiting: 0))
        }
    }

    @Test func waitersAreServedInArrivalOrder() async throws {
        // Queued waiters must outlast the setup of the next ones, which took over 10 s once in a
        // loaded full run: order, not the acquire timeout, is under test here.
        try await Fixture.withSchema(maximumConnections: 1, acquireTimeout: .seconds(120)) { pool, _ in
            let log = EventLog()
            let (first, second) = try await pool.withConnection { _ in
                let first = Task { try await pool.withConnection { _ in log.record("first") } }
                try await Fixture.waitUntil("first waiter queued") { pool.statistics.waiting == 1 }
                let second = Task { try await pool.withConnection { _ in log.record("second") } }
                try await Fixture.waitUntil("second waiter queued") { pool.statistics.waiting == 2 }
                let cancelled = Task { try await pool.withConnection { _ in log.record("cancelled") } }
                try await Fixture.waitUntil("third waiter queued") { pool.statistics.waiting == 3 }
                cancelled.cancel()
                await #expect(throws: CancellationError.self) { try await cancelled.value }
                #expect(pool.statistics.waiting == 2)
                log.record("holder releases")
                return (first, second)
            }
            try await first.value
            try await second.value
            #expect(log.all == ["holder releases", "first", "second"])
        }
    }

    @Test func shutdownFailsWaitersAndLaterCalls() async throws {
        try await Fixture.withSchema(maximumConnections: 1, acquireTimeout: .seconds(120)) { pool, _ in
            try await pool.withConnection { _ in
                let waiter = Task { try await pool.query("SELECT 1") }
                try await Fixture.waitUntil("waiter queued") { pool.statistics.waiting == 1 }
                await pool.shutdown()
                let error = await #expect(throws: PostgresError.self) { try await waiter.value }
                #expect(error?.isPoolClosed == true)
            }
            let error = await #expect(throws: PostgresError.self) { try await pool.query("SELECT 1") }
            #expect(error?.isPoolClosed == true)
            #expect(pool.statistics.open == 0)
        }
    }

    @Test func unreachableServerIsARetryableConnectionFailure() async throws {
        let pool = PostgresPool(
            configuration: PostgresConfiguration(url: "postgresql://subs@127.0.0.1:1/subs", maximumConnections: 1),
            logger: Fixture.logger)
        let error = await #expect(throws: PostgresError.self) { try await pool.query("SELECT 1") }
        #expect(error?.isConnectionFailure == true)
        #expect(error?.isRetryable == true)
        // The failed attempt gave its slot back.
        #expect(pool.statistics.open == 0)
        await pool.shutdown()
    }

    @Test func connectionLeftInsideATransactionIsNotReused() async throws {
        try await Fixture.withSchema(maximumConnections: 1) { pool, _ in
            let leaked: Int32 = try await pool.withConnection { connection in
                try await connection.query("BEGIN")
                return try await connection.query("SELECT pg_backend_pid() AS pid").first!.decode("pid")
            }
            let next: Int32 = try await pool.query("SELECT pg_backend_pid() AS pid").first!.decode("pid")
            #expect(next != leaked)
            let idleInTransaction = try await pool.query(
                "SELECT 1 FROM pg_stat_activity WHERE pid = \(leaked) AND state = 'idle in transaction'")
            #expect(idleInTransaction.count == 0)
        }
    }

    /// Two doctors on call, each going off call if the other still is: a write skew that only
    /// SERIALIZABLE catches. The second transaction writes after the first committed, so it is
    /// the one PostgreSQL aborts with 40001.
    private func writeSkew(_ pool: PostgresPool, secondMaxAttempts: Int) async throws -> (attempts: Int, onCall: Int) {
        try await pool.query("CREATE TABLE duty (doctor text PRIMARY KEY, on_call bool NOT NULL)")
        try await pool.query("INSERT INTO duty VALUES ('alice', true), ('bob', true)")
        let firstRead = Signal()
        let secondRead = Signal()
        let firstDone = Signal()
        let attempts = Locked(0)

        async let first: Void = pool.transaction(isolation: .serializable) { connection in
            let onCall: Int = try await connection.query(
                "SELECT count(*) AS n FROM duty WHERE on_call"
            ).first!.decode("n")
            firstRead.fire()
            await secondRead.wait()
            if onCall > 1 { try await connection.query("UPDATE duty SET on_call = false WHERE doctor = 'alice'") }
        }
        async let second: Void = pool.transaction(isolation: .serializable, maxAttempts: secondMaxAttempts) {
            connection in
            let attempt = attempts.withLock { count -> Int in
                count += 1
                return count
            }
            let onCall: Int = try await connection.query(
                "SELECT count(*) AS n FROM duty WHERE on_call"
            ).first!.decode("n")
            if attempt == 1 {
                secondRead.fire()
                await firstRead.wait()
                await firstDone.wait()
            }
            if onCall > 1 { try await connection.query("UPDATE duty SET on_call = false WHERE doctor = 'bob'") }
        }
        try await first
        firstDone.fire()
        try await second
        let onCall: Int = try await pool.query("SELECT count(*) AS n FROM duty WHERE on_call").first!.decode("n")
        return (attempts.value, onCall)
    }

    @Test func serializationFailureIsRetried() async throws {
        try await Fixture.withSchema { pool, _ in
            let outcome = try await writeSkew(pool, secondMaxAttempts: 3)
            #expect(outcome.attempts == 2)
            #expect(outcome.onCall == 1)
        }
    }

    @Test func serializationFailureSurfacesWithoutRetries() async throws {
        try await Fixture.withSchema { pool, _ in
            let error = await #expect(throws: PostgresError.self) { try await writeSkew(pool, secondMaxAttempts: 1) }
            #expect(error?.sqlState == "40001")
            #expect(error?.isRetryable == true)
        }
    }

    @Test func boundValuesCannotInjectSQL() async throws {
        try await Fixture.withSchema { pool, _ in
            try await pool.query("CREATE TABLE victim (name text)")
            let evil = "x'); DROP TABLE victim; SELECT ('"
            try await pool.query("INSERT INTO victim VALUES (\(evil))")
            let rows = try await pool.query("SELECT name FROM victim WHERE name = \(evil)")
            #expect(try rows.map { try $0.decode("name", as: String.self) } == [evil])
            #expect(try await pool.query("SELECT \(evil)::text AS echoed").first?.decode("echoed", as: String.self) == evil)
            // Identifiers are quoted as a whole, quotes included.
            let table = "odd\"; DROP TABLE victim; --"
            try await pool.query("CREATE TABLE \(identifier: table) (id int)")
            try await pool.query("INSERT INTO \(identifier: table) VALUES (\(7))")
            #expect(try await pool.query("SELECT id FROM \(identifier: table)").first?.decode("id", as: Int.self) == 7)
            #expect(try await pool.query("SELECT count(*) AS n FROM victim").first?.decode("n", as: Int.self) == 1)
            // A NUL would be truncated by C strings; it is refused instead.
            let nul = await #expect(throws: PostgresError.self) { try await pool.query("SELECT \("a\u{0}b")::text") }
            #expect(nul?.sqlState == "22021")
        }
    }

    @Test func interpolationNumbersParametersAndScriptsRunWhole() async throws {
        try await Fixture.withSchema { pool, _ in
            let query: PostgresQuery = "SELECT \(1) + \(2) AS sum, \("a") || \("b") AS text, \(Int?.none) IS NULL AS null"
            #expect(query.sql == "SELECT $1 + $2 AS sum, $3 || $4 AS text, $5 IS NULL AS null")
            #expect(query.binds.count == 5)
            let row = try #require(try await pool.query(query).first)
            #expect(try row.decode("sum", as: Int.self) == 3)
            #expect(try row.decode("text", as: String.self) == "ab")
            #expect(try row.decode("null", as: Bool.self))

            // Scripts (several statements, no binds) only through `unsafeSQL`.
            try await pool.query(
                PostgresQuery(unsafeSQL: "CREATE TABLE script (n int); INSERT INTO script VALUES (1); INSERT INTO script VALUES (2)"))
            #expect(try await pool.query("SELECT n FROM script").count == 2)
            let error = await #expect(throws: PostgresError.self) {
                try await pool.query("INSERT INTO script VALUES (3); INSERT INTO script VALUES (4)")
            }
            #expect(error?.sqlState == "42601")
            let updated = try await pool.query(PostgresQuery(unsafeSQL: "UPDATE script SET n = n + $1", binds: [5.postgresData]))
            #expect(updated.affectedRows == 2)
            #expect(try await pool.query("SELECT n FROM script ORDER BY n").map { try $0.decode(0, as: Int.self) } == [6, 7])
        }
    }

    @Test func preparedStatementsAreCachedWithABound() async throws {
        try await Fixture.withSchema(maximumConnections: 1, statementCacheCapacity: 3) { pool, _ in
            let countPrepared = PostgresQuery(unsafeSQL: "SELECT count(*) AS n FROM pg_prepared_statements")
            try await pool.withConnection { connection in
                for round in 1...3 {
                    for value in 1...5 {
                        let sql = PostgresQuery(unsafeSQL: "SELECT $1::int * \(value) AS product", binds: [round.postgresData])
                        let product: Int = try await connection.query(sql).first!.decode("product")
                        #expect(product == round * value)
                    }
                }
                #expect(try await connection.query(countPrepared).first!.decode("n", as: Int.self) == 3)
                // Reusing a cached statement prepares nothing new.
                try await connection.query("SELECT \(1)::int * 5 AS product")
                #expect(try await connection.query(countPrepared).first!.decode("n", as: Int.self) == 3)
            }
        }
    }

    @Test func cachedStatementSurvivesSchemaChange() async throws {
        try await Fixture.withSchema(maximumConnections: 1) { pool, _ in
            try await pool.query("CREATE TABLE widget (id int)")
            try await pool.query("INSERT INTO widget VALUES (\(1))")
            #expect(try await pool.query("SELECT * FROM widget").columnNames == ["id"])
            try await pool.query("ALTER TABLE widget ADD COLUMN name text")
            #expect(try await pool.query("SELECT * FROM widget").columnNames == ["id", "name"])
        }
    }
}
