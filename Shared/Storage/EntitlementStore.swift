import Domain
import Foundation
import Postgres

/// Why a promotional grant or revocation was refused; nothing was written.
public enum EntitlementGrantError: Error, Sendable, Equatable {
    /// No `app_user` row: grants go to users the service knows.
    case unknownUser(String)
    /// The grant's end is not after its start (`now`).
    case notInFuture
    /// A revocation found no grant of the entitlement in force.
    case nothingInForce(userID: String, entitlement: String)
}

/// Promotional grants (`entitlement_grant`) and the reads that turn a user's chains and grants
/// into entitlements: grants and revocations with their audit rows and outbound events in one
/// transaction, and the clock's end of grants that ran out.
public struct EntitlementStore: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    // MARK: Reads

    /// The user's entitlements at `now` (`Entitlements.items`); an unknown user has none.
    public func entitlements(userID: String, now: Date) async throws -> [EntitlementItem] {
        try await pool.withConnection { try await Self.entitlements(userID: userID, now: now, on: $0) }
    }

    /// The same on the caller's connection (the support case reads it in its snapshot).
    public static func entitlements(userID: String, now: Date, on db: PostgresConnection) async throws -> [EntitlementItem] {
        // Each chain with what its product unlocks; a product the catalogue does not know unlocks nothing.
        let rows = try await db.query(
            """
            SELECT \(sql: UserSubscription.columns),
                   (SELECT to_jsonb(coalesce(array_agg(DISTINCT e ORDER BY e), '{}'::text[]))
                      FROM payment_product p, unnest(coalesce(p.entitlements, ARRAY[p.plan_code])) AS e
                     WHERE p.product_id = s.active_product_id AND NOT p.deleted) AS entitlements
              FROM user_subscription s
             WHERE s.user_id = \(userID)
            """)
        var unlocks: [String: [String]] = [:]
        var chains: [EntitlementChain] = []
        for row in rows {
            let subscription = try UserSubscription(row: row)
            unlocks[subscription.activeProductID] = try row.decode("entitlements", as: PostgresJSON.self).decode([String].self)
            chains.append(
                EntitlementChain(
                    environment: subscription.environment, originalTransactionID: subscription.originalTransactionID,
                    productID: subscription.activeProductID, status: subscription.status(at: now),
                    autoRenewEnabled: subscription.autoRenewEnabled, expiresAt: subscription.expiresAt,
                    graceExpiresAt: subscription.graceExpiresAt, commitmentEndsAt: subscription.commitmentEndsAt))
        }
        let grants = try await Self.grants(userID: userID, on: db)
        return ConsentRescission.entitlements(
            Entitlements.items(chains: chains, grants: grants, entitlementsOf: { unlocks[$0] ?? [] }, now: now),
            rescindedAt: try await consentRescindedAt(userID: userID, on: db), now: now)
    }

    /// When a parent's RESCIND_CONSENT turned the user's entitlements off; nil while the consent holds.
    static func consentRescindedAt(userID: String, on db: PostgresConnection) async throws -> Date? {
        try await db.query("SELECT consent_rescinded_at FROM app_user WHERE user_id = \(userID)").first?
            .decode("consent_rescinded_at", as: Date?.self)
    }

    /// The user's entitlements and grants at `now`, for operators (one snapshot).
    public func overview(userID: String, now: Date) async throws -> EntitlementOverview {
        try await pool.transaction(isolation: .repeatableRead, readOnly: true) {
            try await Self.overview(userID: userID, now: now, on: $0)
        }
    }

    /// The same on the caller's connection.
    public static func overview(userID: String, now: Date, on db: PostgresConnection) async throws -> EntitlementOverview {
        EntitlementOverview(
            userID: userID, items: try await entitlements(userID: userID, now: now, on: db),
            grants: try await grants(userID: userID, on: db),
            consentRescindedAt: try await consentRescindedAt(userID: userID, on: db), now: now)
    }

    /// Every promotional grant of the user, oldest first.
    public func grants(userID: String) async throws -> [PromotionalGrant] {
        try await pool.withConnection { try await Self.grants(userID: userID, on: $0) }
    }

    /// The same on the caller's connection.
    public static func grants(userID: String, on db: PostgresConnection) async throws -> [PromotionalGrant] {
        try await db.query("SELECT \(fragment: Self.columns) FROM entitlement_grant WHERE user_id = \(userID) ORDER BY id")
            .map(Self.grant)
    }

    // MARK: Writes

    /// Grants `entitlement` to `userID` from `now` until `expiresAt`, with its audit row and its
    /// `entitlement.granted` event, in one transaction.
    public func grant(
        userID: String, entitlement: String, expiresAt: Date, environment: String, operator operatorName: String,
        reason: String, now: Date
    ) async throws -> PromotionalGrant {
        guard expiresAt > now else { throw EntitlementGrantError.notInFuture }
        return try await pool.transaction { db in
            guard try await !db.query("SELECT 1 FROM app_user WHERE user_id = \(userID)").isEmpty else {
                throw EntitlementGrantError.unknownUser(userID)
            }
            let grant = try await db.query(
                """
                INSERT INTO entitlement_grant (user_id, entitlement, environment, starts_at, expires_at, reason, granted_by, created_at)
                VALUES (\(userID), \(entitlement), \(environment), \(now), \(expiresAt), \(reason), \(operatorName), \(now))
                RETURNING \(fragment: Self.columns)
                """
            ).map(Self.grant)[0]
            try await AuditLog(pool: pool).record(
                on: db, operator: operatorName, action: "ENTITLEMENT_GRANTED", reason: reason, before: nil,
                after: Self.audit(grant))
            try await OutboundEventStore(pool: pool).append([Self.event(.entitlementGranted, grant, at: now)], on: db)
            return grant
        }
    }

    /// Revokes every grant of `entitlement` to `userID` in force at `now`, with one audit row and an
    /// `entitlement.revoked` event per grant, in one transaction; returns the grants as revoked.
    public func revoke(userID: String, entitlement: String, operator operatorName: String, reason: String, now: Date)
        async throws -> [PromotionalGrant]
    {
        try await pool.transaction { db in
            let revoked = try await db.query(
                """
                UPDATE entitlement_grant
                   SET revoked_at = \(now), revoked_by = \(operatorName), revoke_reason = \(reason)
                 WHERE user_id = \(userID) AND entitlement = \(entitlement) AND revoked_at IS NULL AND ended_at IS NULL
                   AND starts_at <= \(now) AND expires_at > \(now)
                RETURNING \(fragment: Self.columns)
                """
            ).map(Self.grant).sorted { $0.grantID < $1.grantID }
            guard !revoked.isEmpty else { throw EntitlementGrantError.nothingInForce(userID: userID, entitlement: entitlement) }
            var before = revoked
            for index in before.indices { (before[index].revokedAt, before[index].revokedBy, before[index].revokeReason) = (nil, nil, nil) }
            try await AuditLog(pool: pool).record(
                on: db, operator: operatorName, action: "ENTITLEMENT_REVOKED", reason: reason,
                before: AuditGrants(userId: userID, entitlement: entitlement, grants: before.map(Self.audit)),
                after: AuditGrants(userId: userID, entitlement: entitlement, grants: revoked.map(Self.audit)))
            try await OutboundEventStore(pool: pool).append(revoked.map { Self.event(.entitlementRevoked, $0, at: now) }, on: db)
            return revoked
        }
    }

    /// Ends up to `limit` grants whose expiry has passed at `now` (neither revoked nor ended yet),
    /// each with its `entitlement.expired` event, in one transaction; returns how many. Rows
    /// another instance is ending are skipped, so several workers share the work.
    @discardableResult
    public func expireDue(now: Date, limit: Int) async throws -> Int {
        try await pool.transaction { db in
            let ended = try await db.query(
                """
                WITH due AS (
                    SELECT id FROM entitlement_grant
                     WHERE revoked_at IS NULL AND ended_at IS NULL AND expires_at <= \(now)
                     ORDER BY expires_at LIMIT \(limit)
                     FOR UPDATE SKIP LOCKED
                )
                UPDATE entitlement_grant g SET ended_at = \(now) FROM due WHERE g.id = due.id
                RETURNING \(fragment: Self.columns(prefix: "g."))
                """
            ).map(Self.grant)
            // The event is dated at the grant's end, when access stopped, not when the clock noticed.
            try await OutboundEventStore(pool: pool).append(
                ended.map { Self.event(.entitlementExpired, $0, at: $0.expiresAt) }, on: db)
            return ended.count
        }
    }

    // MARK: Rows, audit, events

    private static let columns = columns(prefix: "")

    private static func columns(prefix p: String) -> PostgresQuery {
        PostgresQuery(
            unsafeSQL: """
                \(p)id, \(p)user_id, \(p)entitlement, \(p)environment, \(p)starts_at, \(p)expires_at, \(p)reason, \(p)granted_by,
                \(p)created_at, \(p)revoked_at, \(p)revoked_by, \(p)revoke_reason, \(p)ended_at
                """)
    }

    private static func grant(_ row: PostgresRow) throws -> PromotionalGrant {
        PromotionalGrant(
            grantID: try row.decode("id"), userID: try row.decode("user_id"), entitlement: try row.decode("entitlement"),
            environment: try row.decode("environment"), startsAt: try row.decode("starts_at"),
            expiresAt: try row.decode("expires_at"), reason: try row.decode("reason"), grantedBy: try row.decode("granted_by"),
            createdAt: try row.decode("created_at"), revokedAt: try row.decode("revoked_at"),
            revokedBy: try row.decode("revoked_by"), revokeReason: try row.decode("revoke_reason"),
            endedAt: try row.decode("ended_at"))
    }

    /// A grant in the audit trail, under the API's names (the case finds its rows by the user id in them).
    struct AuditGrant: Encodable, Sendable {
        let grantId: Int64
        let userId: String
        let entitlement: String
        let startsAt: String
        let expiresAt: String
        let revokedAt: String?
    }

    struct AuditGrants: Encodable, Sendable {
        let userId: String
        let entitlement: String
        let grants: [AuditGrant]
    }

    static func audit(_ grant: PromotionalGrant) -> AuditGrant {
        AuditGrant(
            grantId: grant.grantID, userId: grant.userID, entitlement: grant.entitlement,
            startsAt: OutboundEvent.timestamp(grant.startsAt), expiresAt: OutboundEvent.timestamp(grant.expiresAt),
            revokedAt: grant.revokedAt.map(OutboundEvent.timestamp))
    }

    /// The event of a grant's step; its key names the grant and the step, so each is written once.
    static func event(_ type: OutboundEventType, _ grant: PromotionalGrant, at: Date) -> OutboundEvent {
        OutboundEvent(
            key: "\(type.rawValue):grant:\(grant.grantID)", type: type, userID: grant.userID, environment: grant.environment,
            occurredAt: at,
            data: [
                "entitlement": .string(grant.entitlement), "source": .string(EntitlementSource.promotional.rawValue),
                "grantId": .integer(grant.grantID), "startsAt": OutboundValue(grant.startsAt),
                "expiresAt": OutboundValue(grant.expiresAt), "revokedAt": OutboundValue(grant.revokedAt),
                "willRenew": .bool(false),
            ])
    }
}
