import Postgres
import Testing

/// One store's statement inside another's CTE: the fragment's placeholders follow the binds
/// before it, and the whole runs as one statement.
@Suite("PostgreSQL query fragments")
struct QueryFragmentTests {
    @Test func aFragmentsPlaceholdersAreRenumberedAfterTheBindsBeforeIt() async throws {
        let first: PostgresQuery = "SELECT \(1) AS a, \(Optional<String>.none) AS b, \("x") AS c"
        let second: PostgresQuery = "SELECT \(20) AS d, \("y") AS e"
        let query: PostgresQuery = """
            WITH one AS (\(fragment: first)), two AS (\(fragment: second))
            SELECT a, b, c, d, e, \(300) AS f FROM one, two
            """
        #expect(query.binds.count == 6)
        #expect(query.sql.contains("SELECT $4 AS d, $5 AS e"))
        #expect(query.sql.hasSuffix("$6 AS f FROM one, two"))
        try await Fixture.withSchema { pool, _ in
            let row = try #require(try await pool.query(query).first)
            #expect(try row.decode("a", as: Int.self) == 1)
            #expect(try row.decode("b", as: String?.self) == nil)
            #expect(try row.decode("c", as: String.self) == "x")
            #expect(try row.decode("d", as: Int.self) == 20)
            #expect(try row.decode("e", as: String.self) == "y")
            #expect(try row.decode("f", as: Int.self) == 300)
        }
    }

    @Test func aFragmentWithoutBindsIsCopiedAsItIs() {
        let query: PostgresQuery = "SELECT \(1) AS a, (\(fragment: "SELECT 2")) AS b"
        #expect(query.sql == "SELECT $1 AS a, (SELECT 2) AS b")
        #expect(query.binds.count == 1)
    }
}
