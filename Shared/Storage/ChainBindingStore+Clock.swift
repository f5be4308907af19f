import Domain
import Foundation
import Postgres

/// A `user_subscription` row whose next change fell due, as the clock job reads it.
public struct DueSubscription: Sendable {
    public var state: SubscriptionState
    public var userID: String
    /// What the chain's product unlocks (see `ChainBindingStore.entitlementsOfProduct`).
    public var entitlements: [String]
}

extension ChainBindingStore {
    /// What a product unlocks, as the clock job's events name it: its catalogue rows' entitlements
    /// (the plan code where a catalogue names none), as one delimited string (identifiers cannot
    /// hold the unit separator) because a JSON value per row halved the job's speed.
    static let entitlementsOfProduct: PostgresQuery = """
        (SELECT string_agg(DISTINCT e, chr(31) ORDER BY e) FROM payment_product p,
                unnest(coalesce(p.entitlements, ARRAY[p.plan_code])) AS e
          WHERE p.product_id = s.active_product_id AND NOT p.deleted)
        """

    /// Locks up to `limit` rows whose next change is at or before `now` (not frozen), with their
    /// chains: rows another runner holds are skipped, and so are chains whose lock a writer holds
    /// (the worker applying a fact): the row is taken first and the chain's lock only tried, so the
    /// clock never waits on a worker that waits on the row.
    public func lockDueSubscriptions(now: Date, limit: Int, on db: PostgresConnection) async throws -> [DueSubscription] {
        try await db.query(
            """
            WITH due AS MATERIALIZED (
                SELECT s.id FROM user_subscription s
                 WHERE s.next_change_at <= \(now) AND s.frozen_reason IS NULL
                 ORDER BY s.next_change_at LIMIT \(limit)
                   FOR UPDATE SKIP LOCKED
            )
            SELECT s.environment, s.original_transaction_id, s.user_id, s.active_product_id, s.pending_product_id, s.status,
                   s.auto_renew_enabled, s.expires_at, s.grace_expires_at, s.last_transaction_id, s.last_signed_date,
                   s.is_family_shared, s.in_billing_retry, s.next_change_at, s.commitment_ends_at,
                   \(fragment: Self.entitlementsOfProduct) AS entitlements
              FROM due JOIN user_subscription s ON s.id = due.id
             WHERE pg_try_advisory_xact_lock(hashtextextended(s.environment || '/' || s.original_transaction_id, 0))
            """
        ).map { row in
            DueSubscription(
                state: SubscriptionState(
                    originalTransactionID: try row.decode("original_transaction_id"), environment: try row.decode("environment"),
                    activeProductID: try row.decode("active_product_id"), pendingProductID: try row.decode("pending_product_id"),
                    status: try row.decodeValue("status"), autoRenewEnabled: try row.decode("auto_renew_enabled"),
                    expiresAt: try row.decode("expires_at"), graceExpiresAt: try row.decode("grace_expires_at"),
                    lastTransactionID: try row.decode("last_transaction_id"), lastSignedDate: try row.decode("last_signed_date"),
                    isFamilyShared: try row.decode("is_family_shared"), inBillingRetry: try row.decode("in_billing_retry"),
                    nextChangeAt: try row.decode("next_change_at"), commitmentEndsAt: try row.decode("commitment_ends_at")),
                userID: try row.decode("user_id"),
                entitlements: (try row.decode("entitlements", as: String?.self))?.split(separator: "\u{1F}").map(String.init) ?? [])
        }
    }

    /// Stores the rows' status and next change as the clock advanced them (rows locked by
    /// `lockDueSubscriptions` in the same transaction).
    public func storeAdvanced(_ states: [SubscriptionState], on db: PostgresConnection) async throws {
        guard !states.isEmpty else { return }
        try await db.query(
            """
            UPDATE user_subscription s
               SET status = a.status, next_change_at = a.next_change_at, version = s.version + 1, updated_at = now()
              FROM unnest(\(PostgresArray(states.map(\.environment)))::text[],
                          \(PostgresArray(states.map(\.originalTransactionID)))::text[],
                          \(PostgresArray(states.map(\.status.rawValue)))::text[],
                          \(PostgresArray(states.map(\.nextChangeAt)))::timestamptz[])
                   AS a(environment, original, status, next_change_at)
             WHERE s.environment = a.environment AND s.original_transaction_id = a.original
            """)
    }

    /// The oldest next change that fell due before `now` and is still waiting (nil: none).
    public func oldestDueChange(now: Date) async throws -> Date? {
        try await pool.query(
            """
            SELECT min(next_change_at) AS oldest FROM user_subscription
             WHERE next_change_at <= \(now) AND frozen_reason IS NULL
            """
        ).first?.decode("oldest", as: Date?.self)
    }
}
