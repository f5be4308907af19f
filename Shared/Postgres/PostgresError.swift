/// A failure of the database layer.
///
/// `description` names only the kind of failure and the SQLSTATE, because server messages and
/// details quote the offending values (`Key (email)=(...) already exists`); `debugDescription`
/// carries everything, for local debugging only.
public enum PostgresError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// `Code.uniqueViolation`, with the violated constraint.
    case uniqueViolation(constraint: String?, detail: String)
    /// Any other error reported by the server.
    case server(sqlState: Code, message: String, constraint: String?)
    /// Could not connect, or the connection broke (mid-query or while idle).
    case connectionFailed(String)
    /// The pool stayed exhausted for longer than `acquireTimeout`.
    case acquireTimeout
    /// The pool was shut down.
    case poolClosed
    /// A column could not be read as the requested type.
    case decoding(column: String, reason: String)

    /// A SQLSTATE (PostgreSQL's appendix A): open, so codes not listed here still round-trip,
    /// and a string literal is one (`"23505"`).
    public struct Code: RawRepresentable, Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(stringLiteral value: String) { rawValue = value }
        public var description: String { rawValue }

        /// Whether the code is in the class or subclass `prefix` (its first characters): `"08"`,
        /// connection exception; `"22"`, data exception.
        public func hasPrefix(_ prefix: String) -> Bool { rawValue.hasPrefix(prefix) }

        public static let featureNotSupported: Code = "0A000"
        public static let characterNotInRepertoire: Code = "22021"
        public static let checkViolation: Code = "23514"
        public static let uniqueViolation: Code = "23505"
        public static let activeSQLTransaction: Code = "25001"
        public static let inFailedSQLTransaction: Code = "25P02"
        public static let invalidSQLStatementName: Code = "26000"
        public static let serializationFailure: Code = "40001"
        public static let deadlockDetected: Code = "40P01"
        public static let syntaxError: Code = "42601"
        public static let undefinedColumn: Code = "42703"
        public static let undefinedTable: Code = "42P01"
        public static let adminShutdown: Code = "57P01"
        public static let crashShutdown: Code = "57P02"
        public static let cannotConnectNow: Code = "57P03"
        public static let internalError: Code = "XX000"
    }

    /// The SQLSTATE reported by the server, if the server reported one.
    public var sqlState: Code? {
        switch self {
        case .uniqueViolation: .uniqueViolation
        case .server(let sqlState, _, _): sqlState
        default: nil
        }
    }

    /// True when running the same work again may succeed: serialization failures, deadlocks,
    /// broken connections and pool exhaustion.
    public var isRetryable: Bool {
        switch self {
        case .connectionFailed, .acquireTimeout: true
        default: isSerializationFailure
        }
    }

    /// A serialization failure or a deadlock: the transaction should be replayed.
    public var isSerializationFailure: Bool { sqlState == .serializationFailure || sqlState == .deadlockDetected }

    /// SQLSTATE class 22, a value the column cannot hold (a NUL character, overlong text): the
    /// sender's mistake, not the database's.
    public var isDataException: Bool { sqlState?.hasPrefix("22") == true }

    public var description: String {
        switch self {
        case .uniqueViolation(let constraint, _):
            "PostgreSQL unique violation (constraint \(constraint ?? "unknown"))"
        case .server(let sqlState, _, _): "PostgreSQL error \(sqlState)"
        case .connectionFailed: "PostgreSQL connection failed"
        case .acquireTimeout: "timed out waiting for a PostgreSQL connection"
        case .poolClosed: "PostgreSQL pool is closed"
        case .decoding(let column, let reason): "cannot decode column \(column): \(reason)"
        }
    }

    public var debugDescription: String {
        switch self {
        case .uniqueViolation(let constraint, let detail):
            "PostgreSQL unique violation (constraint \(constraint ?? "unknown")): \(detail)"
        case .server(let sqlState, let message, let constraint):
            "PostgreSQL error \(sqlState): \(message)" + (constraint.map { " (constraint \($0))" } ?? "")
        case .connectionFailed(let message): "PostgreSQL connection failed: \(message)"
        default: description
        }
    }
}
