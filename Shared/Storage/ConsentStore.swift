import Postgres

/// Whether a user agreed to share consumption data with Apple when Apple asks about a refund
/// (CONSUMPTION_REQUEST). Unknown counts as no.
public enum ConsumptionConsent: String, Sendable, Codable, CaseIterable {
    case granted = "GRANTED"
    case denied = "DENIED"
    case unknown = "UNKNOWN"

    init(_ granted: Bool?) { self = granted.map { $0 ? .granted : .denied } ?? .unknown }

    var granted: Bool? {
        switch self {
        case .granted: true
        case .denied: false
        case .unknown: nil
        }
    }
}

/// The one place consent is read and written (the user's REST call and the operator's command),
/// so both leave the same audit trail.
public struct ConsentStore: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// The user's current choice (unknown for a user never seen).
    public func load(userID: String) async throws -> ConsumptionConsent {
        let rows = try await pool.query(
            "SELECT granted FROM user_consent WHERE user_id = \(userID) AND purpose = 'CONSUMPTION_DATA'")
        return ConsumptionConsent(try rows.first?.decode("granted", as: Bool.self))
    }

    /// Records a choice with an audit row naming who recorded it and why; returns the choice
    /// before and after, or nil when the user does not exist and `createUser` is false (an
    /// operator's typo must not invent an account; an authenticated user may choose before buying).
    public func record(
        _ consent: ConsumptionConsent, userID: String, createUser: Bool, recordedBy: String, reason: String
    ) async throws -> (before: ConsumptionConsent, after: ConsumptionConsent)? {
        try await pool.transaction { db in
            if createUser { try await UserStore.ensureUser(userID, on: db) }
            // The user row lock orders concurrent choices of one user: the audit trail reads in commit order.
            guard try await db.query("SELECT 1 FROM app_user WHERE user_id = \(userID) FOR UPDATE").count == 1 else {
                return nil
            }
            let before = ConsumptionConsent(
                try await db.query(
                    "SELECT granted FROM user_consent WHERE user_id = \(userID) AND purpose = 'CONSUMPTION_DATA'"
                ).first.map { try $0.decode("granted", as: Bool.self) })
            if let granted = consent.granted {
                try await db.query(
                    """
                    INSERT INTO user_consent (user_id, purpose, granted, recorded_by)
                    VALUES (\(userID), 'CONSUMPTION_DATA', \(granted), \(recordedBy))
                    ON CONFLICT (user_id, purpose) DO UPDATE
                        SET granted = EXCLUDED.granted, recorded_by = EXCLUDED.recorded_by, recorded_at = now()
                    """)
            } else {
                try await db.query("DELETE FROM user_consent WHERE user_id = \(userID) AND purpose = 'CONSUMPTION_DATA'")
            }
            try await AuditLog(pool: pool).record(
                on: db, operator: recordedBy, action: "CONSENT_RECORDED", reason: reason,
                before: ConsentAudit(userId: userID, consumptionData: before.granted),
                after: ConsentAudit(userId: userID, consumptionData: consent.granted))
            return (before, consent)
        }
    }
}

extension ConsentStore {
    /// Removes the user's consumption-data consent on the caller's transaction (a rescinded
    /// consent voids what the user agreed to; the caller writes the audit row); whether there was one.
    static func removeConsumptionConsent(userID: String, on db: PostgresConnection) async throws -> Bool {
        try await db.query(
            "DELETE FROM user_consent WHERE user_id = \(userID) AND purpose = 'CONSUMPTION_DATA' RETURNING user_id"
        ).count > 0
    }
}

/// A consent choice as its audit row shows it (an unanswered choice is an explicit null).
private struct ConsentAudit: Encodable, Sendable {
    let userId: String
    let consumptionData: Bool?

    private enum CodingKeys: String, CodingKey { case userId, consumptionData }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(userId, forKey: .userId)
        try container.encode(consumptionData, forKey: .consumptionData)
    }
}
