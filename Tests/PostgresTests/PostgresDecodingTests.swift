import Foundation
import Postgres
import Testing

@Suite("PostgreSQL types")
struct PostgresDecodingTests {
    struct Document: Codable, Equatable {
        let name: String
        let tags: [String]
    }

    @Test func everyTypeRoundTripsThroughItsColumn() async throws {
        try await Fixture.withSchema { pool, _ in
            try await pool.query(
                """
                CREATE TABLE everything (
                    t text, i4 int4, i8 int8, n numeric, b bool, u uuid, ts timestamptz,
                    raw bytea, blob bytea, j jsonb, d float8, nothing text)
                """)
            let uuid = UUID()
            let date = Date(timeIntervalSince1970: 1_709_251_199.123_456)
            let document = Document(name: "été ☃", tags: ["a", "\"quoted\""])
            let decimal = try #require(Decimal(string: "-12345678901234567890.123456789", locale: Locale(identifier: "en_US_POSIX")))
            try await pool.query(
                """
                INSERT INTO everything VALUES (
                    \("line\nquote' backslash\\ ☃"), \(Int32.min), \(Int64.max), \(decimal), \(true), \(uuid), \(date),
                    \([UInt8]([0, 1, 254, 255])), \(Data("bytes".utf8)), \(try PostgresJSON(encoding: document)),
                    \(-0.1), \(String?.none))
                """)
            let row = try #require(try await pool.query("SELECT * FROM everything").first)
            #expect(try row.decode("t", as: String.self) == "line\nquote' backslash\\ ☃")
            #expect(try row.decode("i4", as: Int32.self) == Int32.min)
            #expect(try row.decode("i8", as: Int64.self) == Int64.max)
            #expect(try row.decode("i8", as: Int.self) == Int.max)
            #expect(try row.decode("n", as: Decimal.self) == decimal)
            #expect(try row.decode("b", as: Bool.self) == true)
            #expect(try row.decode("u", as: UUID.self) == uuid)
            #expect(try row.decode("ts", as: Date.self) == date)
            #expect(try row.decode("raw", as: [UInt8].self) == [0, 1, 254, 255])
            #expect(try row.decode("blob", as: Data.self) == Data("bytes".utf8))
            #expect(try row.decode("j", as: PostgresJSON.self).decode(Document.self) == document)
            #expect(try row.decode("d", as: Double.self) == -0.1)
            #expect(try row.decode("nothing", as: String?.self) == nil)
            #expect(try row.decode(0, as: String?.self) == "line\nquote' backslash\\ ☃")
            #expect(row.isNull("nothing"))
            #expect(!row.isNull("t"))
            // The server parsed the timestamp to the microsecond.
            let micros = try #require(
                try await pool.query(
                    "SELECT to_char(ts, 'YYYY-MM-DD HH24:MI:SS.US') AS text FROM everything"
                ).first)
            #expect(try micros.decode("text", as: String.self) == "2024-02-29 23:59:59.123456")
        }
    }

    @Test func serverFormattedValuesDecode() async throws {
        try await Fixture.withSchema { pool, _ in
            let row = try #require(
                try await pool.query(
                    """
                    SELECT '2024-02-29 23:59:59.5+02'::timestamptz AS ts,
                           '1999-12-31 23:00:00'::timestamptz AS whole,
                           '0044-03-15 12:00:00+00 BC'::timestamptz AS ides,
                           'f'::bool AS no, '\\x00ff'::bytea AS bytes, '{"name": "x", "tags": []}'::jsonb AS doc,
                           '0.000001'::numeric AS tiny, 'NaN'::numeric AS nan, 42::int2 AS small,
                           'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'::uuid AS id, NULL::int AS missing
                    """
                ).first)
            #expect(try row.decode("ts", as: Date.self) == Date(timeIntervalSince1970: 1_709_243_999.5))
            #expect(try row.decode("whole", as: Date.self) == Date(timeIntervalSince1970: 946_681_200))
            let ides = try row.decode("ides", as: Date.self)
            #expect(try await pool.query("SELECT \(ides) = '0044-03-15 12:00:00+00 BC'::timestamptz AS same").first!.decode("same", as: Bool.self))
            #expect(try row.decode("no", as: Bool.self) == false)
            #expect(try row.decode("bytes", as: [UInt8].self) == [0, 255])
            #expect(try row.decode("doc", as: String.self) == #"{"name": "x", "tags": []}"#)
            #expect(try row.decode("doc", as: PostgresJSON.self).decode(Document.self) == Document(name: "x", tags: []))
            #expect(try row.decode("tiny", as: Decimal.self) == Decimal(sign: .plus, exponent: -6, significand: 1))
            #expect(try row.decode("nan", as: Decimal.self).isNaN)
            #expect(try row.decode("small", as: Int.self) == 42)
            #expect(try row.decode("id", as: UUID.self) == UUID(uuidString: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"))
            #expect(try row.decode("missing", as: Int?.self) == nil)
        }
    }

    @Test func decodingFailuresNameTheColumn() async throws {
        try await Fixture.withSchema { pool, _ in
            let row = try #require(
                try await pool.query(
                    """
                    SELECT NULL::text AS missing, 'abc'::text AS word, '-infinity'::timestamptz AS ts,
                           '\\x0g'::text AS hex, '\\x012'::text AS odd
                    """
                ).first)
            for (column, attempt) in [
                ("missing", { _ = try row.decode("missing", as: String.self) }),
                ("word", { _ = try row.decode("word", as: Int.self) }),
                ("ts", { _ = try row.decode("ts", as: Date.self) }),
                ("hex", { _ = try row.decode("hex", as: [UInt8].self) }),
                ("odd", { _ = try row.decode("odd", as: [UInt8].self) }),
                ("absent", { _ = try row.decode("absent", as: String.self) }),
            ] as [(String, () throws -> Void)] {
                let error = #expect(throws: PostgresError.self) { try attempt() }
                guard case .decoding(let name, _)? = error else {
                    Issue.record("expected a decoding error, got \(String(describing: error))")
                    continue
                }
                #expect(name == column)
                #expect(!"\(error!)".contains("abc"))
            }
        }
    }

    @Test func typedNullsAndArrays() async throws {
        try await Fixture.withSchema { pool, _ in
            // A nil still announces its type, so the server can resolve `$1 IS NULL` and friends.
            let row = try #require(
                try await pool.query(
                    "SELECT \(UUID?.none) IS NULL AS a, \(Date?.none) IS NULL AS b, \(Int?.some(3)) + 1 AS c"
                ).first)
            #expect(try row.decode("a", as: Bool.self))
            #expect(try row.decode("b", as: Bool.self))
            #expect(try row.decode("c", as: Int.self) == 4)

            try await pool.query("CREATE TABLE pair (id int8, label text)")
            let ids = [1, 2, 3, 4, 5]
            // Text arrays travel in binary format: quotes, braces, NULL, empty and non-ASCII intact.
            let labels: [String?] = ["one", "t\"w\\o,}", nil, "", "NULL {é}"]
            let inserted = try await pool.query(
                "INSERT INTO pair SELECT * FROM unnest(\(PostgresArray(ids)), \(PostgresArray(labels)))")
            #expect(inserted.affectedRows == 5)
            let rows = try await pool.query(
                "SELECT id, label FROM pair WHERE id = ANY(\(PostgresArray(ids))) ORDER BY id")
            #expect(try rows.map { try $0.decode("label", as: String?.self) } == labels)
            let uuids = [UUID(), UUID()]
            let echoed = try await pool.query("SELECT unnest(\(PostgresArray(uuids))) AS u")
            #expect(try echoed.map { try $0.decode("u", as: UUID.self) } == uuids)
        }
    }

    @Test func datesAtTheEdgesRoundTrip() async throws {
        try await Fixture.withSchema { pool, _ in
            let cases: [(TimeInterval, String)] = [
                (0, "1970-01-01 00:00:00.000000 AD"), (-0.000_001, "1969-12-31 23:59:59.999999 AD"),
                (951_782_400, "2000-02-29 00:00:00.000000 AD"), (4_102_444_799.999_999, "2099-12-31 23:59:59.999999 AD"),
                (-62_135_596_800, "0001-01-01 00:00:00.000000 AD"),
            ]
            for (seconds, text) in cases {
                let date = Date(timeIntervalSince1970: seconds)
                let row = try #require(
                    try await pool.query(
                        "SELECT \(date) AS d, to_char(\(date), 'YYYY-MM-DD HH24:MI:SS.US AD') AS text"
                    ).first)
                #expect(try row.decode("text", as: String.self) == text)
                #expect(try row.decode("d", as: Date.self) == date)
            }
        }
    }

    /// A date no column can hold (an Apple payload's `1e400` milliseconds parses as infinity) is a
    /// data exception of the statement, not a trap in this process.
    @Test func datesBeyondTheColumnsRangeAreADataException() async throws {
        try await Fixture.withSchema { pool, _ in
            for seconds in [TimeInterval.infinity, -.infinity, 1e20, -1e20, 9.3e12] {
                do {
                    _ = try await pool.query("SELECT \(Date(timeIntervalSince1970: seconds)) AS d")
                    Issue.record("\(seconds) s was accepted")
                } catch let error as PostgresError {
                    #expect(error.isDataException, "\(seconds): \(error)")
                }
            }
            let far = try #require(try await pool.query("SELECT \(Date(timeIntervalSince1970: 9.1e12)) AS d").first)
            #expect(try far.decode("d", as: Date.self) == Date(timeIntervalSince1970: 9.1e12), "within the range, kept exactly")
        }
    }
}
