import Foundation
import Postgres

/// The trail of manual actions (`audit_log`): who did what, why, and the state before and after.
///
/// Written inside the action's own transaction, so an action and its audit row commit together.
public struct AuditLog: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Records one action; `before` and `after` are stored as jsonb (keys sorted, so equal states
    /// read back equal).
    public func record(
        on db: PostgresConnection, operator operatorName: String, action: String, reason: String,
        before: (any Encodable & Sendable)?, after: (any Encodable & Sendable)?
    ) async throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try await record(
            on: db, operator: operatorName, action: action, reason: reason,
            before: try before.map { try PostgresJSON(encoding: $0, encoder: encoder) },
            after: try after.map { try PostgresJSON(encoding: $0, encoder: encoder) })
    }

    /// Records an action taken outside the database (a call to Apple), in a transaction of its own.
    public func record(
        operator operatorName: String, action: String, reason: String, before: (any Encodable & Sendable)?,
        after: (any Encodable & Sendable)?
    ) async throws {
        try await pool.withConnection { db in
            try await record(on: db, operator: operatorName, action: action, reason: reason, before: before, after: after)
        }
    }

    /// Records one action whose states are already JSON (a row read back as jsonb, say).
    public func record(
        on db: PostgresConnection, operator operatorName: String, action: String, reason: String,
        before: PostgresJSON?, after: PostgresJSON?
    ) async throws {
        try await db.query(
            """
            INSERT INTO audit_log (operator, action, reason, before, after)
            VALUES (\(operatorName), \(action), \(reason), \(before), \(after))
            """)
    }
}
