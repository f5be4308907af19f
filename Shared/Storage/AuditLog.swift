import Foundation
import Postgres

/// The trail of manual actions (`audit_log`): who did what, why, and the state before and after.
///
/// Written inside the action's own transaction, so an action and its audit row commit together.
public enum AuditLog {
    /// Records one action; `before` and `after` are stored as jsonb (keys sorted, so equal states
    /// read back equal).
    public static func record(
        on db: PostgresConnection, operator operatorName: String, action: String, reason: String,
        before: (any Encodable & Sendable)?, after: (any Encodable & Sendable)?
    ) async throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        try await db.query(
            """
            INSERT INTO audit_log (operator, action, reason, before, after)
            VALUES (\(operatorName), \(action), \(reason),
                    \(try before.map { try PostgresJSON(encoding: $0, encoder: encoder) }),
                    \(try after.map { try PostgresJSON(encoding: $0, encoder: encoder) }))
            """)
    }
}
