import Domain
import Foundation
import Postgres

/// The SQL of `app_user` and `user_account_token`: the business users, their StoreKit account
/// tokens, the test-user flag, and who owns a purchase.
public struct UserStore: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Creates the user unless it exists.
    static func ensureUser(_ userID: String, on db: PostgresConnection) async throws {
        try await db.query("INSERT INTO app_user (user_id) VALUES (\(userID)) ON CONFLICT DO NOTHING")
    }

    /// Locks the user's row until the transaction ends: serialises the user's changes that must
    /// see each other (order creation, flag changes and their audit rows in commit order).
    @discardableResult
    static func lockUser(_ userID: String, on db: PostgresConnection) async throws -> PostgresRow? {
        try await db.query("SELECT user_id, is_test_user FROM app_user WHERE user_id = \(userID) FOR UPDATE").first
    }

    /// Gives the user a random account token (never derived from the user id) unless they have one.
    static func ensureAccountToken(_ userID: String, on db: PostgresConnection) async throws {
        try await db.query(
            """
            INSERT INTO user_account_token (user_id, app_account_token) VALUES (\(userID), gen_random_uuid())
            ON CONFLICT (user_id) DO NOTHING
            """)
    }

    /// The business user a purchase belongs to: the user recorded on the transaction, else the
    /// user of its appAccountToken, else the owner of its chain (its subscription row or binding);
    /// nil when none is known.
    public func owner(
        ofTransaction transactionID: String, originalTransactionID: String, environment: String, appAccountToken: UUID?
    ) async throws -> String? {
        try await pool.query(
            """
            SELECT coalesce(
                (SELECT user_id FROM apple_transaction WHERE environment = \(environment) AND transaction_id = \(transactionID)),
                (SELECT user_id FROM user_account_token WHERE app_account_token::text = \(appAccountToken?.uuidString.lowercased())),
                (SELECT user_id FROM user_subscription
                  WHERE environment = \(environment) AND original_transaction_id = \(originalTransactionID)),
                (SELECT user_id FROM chain_binding
                  WHERE environment = \(environment) AND original_transaction_id = \(originalTransactionID))
            ) AS owner
            """
        ).first?.decode("owner", as: String?.self)
    }

    /// A user's side of a rescinded consent as its audit row shows it.
    struct ConsentRescissionState: Encodable, Sendable {
        let userId: String
        let appTransactionId: String
        let consentRescindedAt: Date?
        /// The entitlements active (before) or still active (after, none).
        let activeEntitlements: [String]
        let consumptionDataConsent: Bool
    }

    /// Apple's RESCIND_CONSENT for the Apple Account `appTransactionID` (`ConsentRescission`'s
    /// rule): every user whose transactions that Account signed loses their entitlements and their
    /// consent-scoped data, each with an audit row and an `account.consent_rescinded` event (when
    /// `events`), in one transaction. A user rescinded before is left as is, so a redelivery adds
    /// nothing, and so does one Apple signed (`signedAt`) before an operator restored the user's
    /// consent (`ConsentRescission.applies`). Returns the users newly rescinded.
    public func rescindConsent(
        appTransactionID: String, environment: String, notificationUUID: String, signedAt: Date?, events: Bool, now: Date
    ) async throws -> [String] {
        try await pool.transaction { db in
            let users = try await ChainBindingStore.appTransactionUsers(
                environment: environment, appTransactionID: appTransactionID, on: db
            ).map(\.userID)
            var rescinded: [String] = []
            for user in users {
                // Locked in id order, as every writer of several users does.
                guard
                    let row = try await db.query(
                        "SELECT consent_rescinded_at, consent_restored_at FROM app_user WHERE user_id = \(user) FOR UPDATE"
                    ).first, try row.decode("consent_rescinded_at", as: Date?.self) == nil,
                    ConsentRescission.applies(signedAt: signedAt, restoredAt: try row.decode("consent_restored_at"))
                else { continue }
                let active = try await EntitlementStore.entitlements(userID: user, now: now, on: db).filter(\.active)
                    .map(\.entitlement)
                let hadConsent = try await ConsentStore.removeConsumptionConsent(userID: user, on: db)
                try await db.query("UPDATE app_user SET consent_rescinded_at = \(now) WHERE user_id = \(user)")
                try await AuditLog(pool: pool).record(
                    on: db, operator: "apple", action: "CONSENT_RESCINDED", reason: "RESCIND_CONSENT \(notificationUUID)",
                    before: ConsentRescissionState(
                        userId: user, appTransactionId: appTransactionID, consentRescindedAt: nil, activeEntitlements: active,
                        consumptionDataConsent: hadConsent),
                    after: ConsentRescissionState(
                        userId: user, appTransactionId: appTransactionID, consentRescindedAt: now, activeEntitlements: [],
                        consumptionDataConsent: false))
                if events {
                    try await OutboundEventStore(pool: pool).append(
                        [
                            ConsentRescission.event(
                                userID: user, environment: environment, appTransactionID: appTransactionID,
                                notificationUUID: notificationUUID, turnedOff: active,
                                removed: hadConsent ? [ConsentRescission.consumptionDataConsent] : [], now: now)
                        ], on: db)
                }
                rescinded.append(user)
            }
            return rescinded
        }
    }

    /// Why a consent was not restored; nothing was written.
    public enum ConsentRestoreError: Error, Sendable, Equatable {
        case unknownUser(String)
        /// The user's consent was never rescinded, or was restored already.
        case notRescinded(String)
    }

    /// A restored consent: when it had been rescinded, and the entitlements in force again; encoded
    /// as the admin API and `subsctl consent restore --json` answer it.
    public struct ConsentRestoration: Sendable, Equatable, Encodable {
        public let userID: String
        public let rescindedAt: Date
        public let restoredAt: Date
        public let entitlements: [String]

        private enum CodingKeys: String, CodingKey {
            case userID = "userId"
            case rescindedAt, restoredAt, entitlements
        }
    }

    /// A user's side of a restored consent as its audit row shows it (the time as the API writes
    /// it; null once restored).
    struct ConsentRestorationState: Encodable, Sendable {
        let userId: String
        let consentRescindedAt: Date?
        /// The entitlements active: none before, as the chains and grants say after.
        let activeEntitlements: [String]

        private enum CodingKeys: String, CodingKey { case userId, consentRescindedAt, activeEntitlements }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(userId, forKey: .userId)
            try container.encode(consentRescindedAt.map(OutboundEvent.timestamp), forKey: .consentRescindedAt)
            try container.encode(activeEntitlements, forKey: .activeEntitlements)
        }
    }

    /// An operator's answer to a rescission that no longer holds (the parent granted consent
    /// again, which Apple tells us nothing of, or the notification named the wrong account): the
    /// user's entitlements read as their chains and grants say from `now`, with an audit row
    /// (`CONSENT_RESTORED`) and an `account.consent_restored` event in one transaction. The
    /// consumption-data consent the rescission removed stays removed: only the user can give it.
    public func restoreConsent(
        userID: String, environment: String, operator operatorName: String, reason: String, now: Date
    ) async throws -> ConsentRestoration {
        try await pool.transaction { db in
            guard
                let row = try await db.query(
                    "SELECT consent_rescinded_at FROM app_user WHERE user_id = \(userID) FOR UPDATE"
                ).first
            else { throw ConsentRestoreError.unknownUser(userID) }
            guard let rescindedAt = try row.decode("consent_rescinded_at", as: Date?.self) else {
                throw ConsentRestoreError.notRescinded(userID)
            }
            try await db.query(
                "UPDATE app_user SET consent_rescinded_at = NULL, consent_restored_at = \(now) WHERE user_id = \(userID)")
            let active = try await EntitlementStore.entitlements(userID: userID, now: now, on: db).filter(\.active)
                .map(\.entitlement)
            try await AuditLog(pool: pool).record(
                on: db, operator: operatorName, action: "CONSENT_RESTORED", reason: reason,
                before: ConsentRestorationState(userId: userID, consentRescindedAt: rescindedAt, activeEntitlements: []),
                after: ConsentRestorationState(userId: userID, consentRescindedAt: nil, activeEntitlements: active))
            try await OutboundEventStore(pool: pool).append(
                [
                    ConsentRescission.restoredEvent(
                        userID: userID, environment: environment, rescindedAt: rescindedAt, entitlements: active,
                        operator: operatorName, reason: reason, now: now)
                ], on: db)
            return ConsentRestoration(userID: userID, rescindedAt: rescindedAt, restoredAt: now, entitlements: active)
        }
    }

    /// The state recorded in the audit trail of a test-user change.
    struct TestUserState: Encodable, Sendable {
        let userId: String
        let isTestUser: Bool
    }

    /// Flags (or unflags) a user as a test user, creating the user if needed, with an audit row
    /// naming who did it and why; returns the flag before.
    public func setTestUser(_ userID: String, enabled: Bool, operator operatorName: String, reason: String) async throws
        -> Bool
    {
        try await pool.transaction { db in
            try await Self.ensureUser(userID, on: db)
            guard let row = try await Self.lockUser(userID, on: db) else { throw PostgresError.decoding(column: "user_id", reason: "no such user") }
            let before: Bool = try row.decode("is_test_user")
            try await db.query("UPDATE app_user SET is_test_user = \(enabled) WHERE user_id = \(userID)")
            try await AuditLog(pool: pool).record(
                on: db, operator: operatorName, action: "TEST_USER_FLAGGED", reason: reason,
                before: TestUserState(userId: userID, isTestUser: before), after: TestUserState(userId: userID, isTestUser: enabled))
            return before
        }
    }
}
