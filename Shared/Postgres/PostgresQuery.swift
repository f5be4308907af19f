/// SQL text with its parameters bound separately: every interpolated value becomes `$n`.
///
/// `"select * from t where id = \(id)"` sends `select * from t where id = $1` plus the value, so
/// a value can never change the statement. SQL text from elsewhere needs `init(unsafeSQL:)`.
public struct PostgresQuery: Sendable, ExpressibleByStringInterpolation, CustomStringConvertible {
    public private(set) var sql: String
    public private(set) var binds: [PostgresData]
    /// Unprepared, possibly several statements (migrations): only `init(unsafeSQL:)` without binds.
    let isScript: Bool

    /// SQL given as is, with `$n` placeholders for `binds`. Without binds, the text may hold
    /// several statements; it then runs unprepared through the simple query protocol.
    public init(unsafeSQL sql: String, binds: [PostgresData] = []) {
        self.sql = sql
        self.binds = binds
        isScript = binds.isEmpty
    }

    public init(stringLiteral value: String) {
        sql = value
        binds = []
        isScript = false
    }

    public init(stringInterpolation: StringInterpolation) {
        sql = stringInterpolation.sql
        binds = stringInterpolation.binds
        isScript = false
    }

    /// The SQL only: bound values may be personal data and stay out of logs.
    public var description: String { sql }

    /// Builds the SQL text and the binds of an interpolated query.
    public struct StringInterpolation: StringInterpolationProtocol {
        var sql = ""
        var binds: [PostgresData] = []

        public init(literalCapacity: Int, interpolationCount: Int) {
            sql.reserveCapacity(literalCapacity + interpolationCount * 3)
            binds.reserveCapacity(interpolationCount)
        }

        public mutating func appendLiteral(_ literal: String) { sql += literal }

        /// A value, sent as the next `$n` parameter.
        public mutating func appendInterpolation<Value: PostgresEncodable>(_ value: Value) {
            binds.append(value.postgresData)
            sql += "$\(binds.count)"
        }

        /// An optional value: NULL when nil (of the wrapped type, so the server knows it).
        /// Spelled out so interpolating optionals raises no "debug description" warning.
        public mutating func appendInterpolation<Value: PostgresEncodable>(_ value: Value?) {
            binds.append(value.postgresData)
            sql += "$\(binds.count)"
        }

        /// A fragment of SQL written in the source (a shared column list): a `StaticString`, so it can
        /// never come from input.
        public mutating func appendInterpolation(sql fragment: StaticString) {
            sql += fragment.description
        }

        /// Another interpolated query as part of this one (one store's statement inside another's
        /// CTE): its text, its `$n` renumbered after the binds before it, and its binds. Only an
        /// interpolated query qualifies: its text holds no `$` but its placeholders.
        public mutating func appendInterpolation(fragment: PostgresQuery) {
            let offset = binds.count
            var text = fragment.sql.utf8[...]
            while let dollar = text.firstIndex(of: UInt8(ascii: "$")) {
                sql += String(Substring(text[..<dollar]))
                let digits = text[text.index(after: dollar)...].prefix { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
                sql += "$" + (Int(String(Substring(digits))).map { String($0 + offset) } ?? "")
                text = text[digits.endIndex...]
            }
            sql += String(Substring(text))
            binds += fragment.binds
        }

        /// A table, column, schema or channel name, double-quoted (so it is taken verbatim, case included).
        public mutating func appendInterpolation(identifier: String) {
            sql += PostgresQuery.quoteIdentifier(identifier)
        }
    }

    static func quoteIdentifier(_ name: String) -> String {
        "\"" + name.split(separator: "\"", omittingEmptySubsequences: false).joined(separator: "\"\"") + "\""
    }
}
