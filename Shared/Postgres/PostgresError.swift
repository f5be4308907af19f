/// A failure of the database layer.
///
/// `description` names only the kind of failure and the SQLSTATE, because server messages and
/// details quote the offending values (`Key (email)=(...) already exists`); `debugDescription`
/// carries everything, for local debugging only.
public enum PostgresError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// 23505, with the violated constraint.
    case uniqueViolation(constraint: String?, detail: String)
    /// Any other error reported by the server.
    case server(sqlState: String, message: String, constraint: String?)
    /// Could not connect, or the connection broke (mid-query or while idle).
    case connectionFailed(String)
    /// The pool stayed exhausted for longer than `acquireTimeout`.
    case acquireTimeout
    /// The pool was shut down.
    case poolClosed
    /// A column could not be read as the requested type.
    case decoding(column: String, reason: String)

    /// The SQLSTATE reported by the server, if the server reported one.
    public var sqlState: String? {
        switch self {
        case .uniqueViolation: "23505"
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

    /// 40001 (serialization failure) or 40P01 (deadlock): the transaction should be replayed.
    public var isSerializationFailure: Bool { sqlState == "40001" || sqlState == "40P01" }

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
