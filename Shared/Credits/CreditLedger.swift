import Domain
import Foundation
import Postgres

/// A grant to book for one user; `decision.grantKey` is unique in the database, so booking it
/// again changes nothing.
public struct CreditGrant: Sendable, Hashable {
    public var userID: String
    public var decision: GrantDecision
    /// The Apple transaction that earned it (nil for welcome credits and adjustments).
    public var environment: String?
    public var transactionID: String?
    public var originalTransactionID: String?

    public init(
        userID: String, decision: GrantDecision, environment: String? = nil, transactionID: String? = nil,
        originalTransactionID: String? = nil
    ) {
        self.userID = userID
        self.decision = decision
        self.environment = environment
        self.transactionID = transactionID
        self.originalTransactionID = originalTransactionID
    }
}

/// What a revocation took back and what it could not (already spent).
public struct CreditRevocation: Sendable, Hashable {
    public var revoked: MicroCredits
    public var unrecoverable: MicroCredits

    public init(revoked: MicroCredits, unrecoverable: MicroCredits) {
        self.revoked = revoked
        self.unrecoverable = unrecoverable
    }
}

/// What a manual adjustment did (or, for a retried number, did the first time).
public struct CreditAdjustment: Sendable, Hashable {
    public var adjustmentNo: String
    public var userID: String
    public var pool: CreditPool
    /// What the operator asked: positive credits the pool, negative debits it.
    public var amount: MicroCredits
    /// The change booked on the balance: the amount, or for a debit at most what the pool held.
    public var applied: MicroCredits
    /// The part of a debit the pool could not cover (`amount = applied - unrecoverable`).
    public var unrecoverable: MicroCredits
    public var balanceAfter: MicroCredits
    /// False when the number had been booked before: nothing new was, this is the first result.
    public var booked: Bool

    public init(
        adjustmentNo: String, userID: String, pool: CreditPool, amount: MicroCredits, applied: MicroCredits,
        unrecoverable: MicroCredits, balanceAfter: MicroCredits, booked: Bool
    ) {
        self.adjustmentNo = adjustmentNo
        self.userID = userID
        self.pool = pool
        self.amount = amount
        self.applied = applied
        self.unrecoverable = unrecoverable
        self.balanceAfter = balanceAfter
        self.booked = booked
    }
}

/// Why an adjustment was refused; nothing was booked.
public enum CreditAdjustmentError: Error, Sendable, Hashable {
    case unknownUser(String)
    /// The number was booked before for another user, pool or amount: that booking.
    case numberUsedForAnother(CreditAdjustment)
}

/// Every write to the credit tables. Each function runs on the caller's connection, inside the
/// caller's transaction, so a grant commits or rolls back with the fulfillment that earned it.
/// Every balance change is one ledger entry whose `balance_after` is the new balance; balances
/// never go below zero (the code never asks for it, and a CHECK refuses it anyway).
public enum CreditLedger {
    /// Books the grants whose keys are new; returns how many were.
    @discardableResult
    public static func grant(_ grants: [CreditGrant], on db: PostgresConnection) async throws -> Int {
        guard !grants.isEmpty else { return 0 }
        let rows = try await db.query(
            """
            WITH new_grant AS (
                INSERT INTO credit_grant (
                    grant_key, user_id, pool, amount, reason, environment, transaction_id, original_transaction_id)
                SELECT g.key, g.user_id, g.pool, g.amount, g.reason, nullif(g.environment, ''),
                       nullif(g.transaction_id, ''), nullif(g.original, '')
                  FROM unnest(\(PostgresArray(grants.map(\.decision.grantKey)))::text[],
                              \(PostgresArray(grants.map(\.userID)))::text[],
                              \(PostgresArray(grants.map(\.decision.pool.rawValue)))::text[],
                              \(PostgresArray(grants.map(\.decision.amount)))::bigint[],
                              \(PostgresArray(grants.map(\.decision.reason)))::text[],
                              \(PostgresArray(grants.map { $0.environment ?? "" }))::text[],
                              \(PostgresArray(grants.map { $0.transactionID ?? "" }))::text[],
                              \(PostgresArray(grants.map { $0.originalTransactionID ?? "" }))::text[])
                       AS g(key, user_id, pool, amount, reason, environment, transaction_id, original)
                 ORDER BY g.user_id, g.pool
                ON CONFLICT (grant_key) DO NOTHING
                RETURNING user_id, pool, amount, grant_key
            ), account AS (
                INSERT INTO credit_account AS a (user_id, pool, balance)
                SELECT user_id, pool, sum(amount) FROM new_grant GROUP BY user_id, pool ORDER BY user_id, pool
                ON CONFLICT (user_id, pool) DO UPDATE SET balance = a.balance + EXCLUDED.balance, updated_at = now()
                RETURNING user_id, pool, balance
            ), ledger AS (
                -- Each entry's balance_after: the final balance minus the grants booked after it.
                INSERT INTO credit_ledger (user_id, pool, delta, balance_after, entry_type, reference)
                SELECT g.user_id, g.pool, g.amount,
                       a.balance - coalesce(sum(g.amount) OVER (PARTITION BY g.user_id, g.pool ORDER BY g.grant_key DESC
                                                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0),
                       'GRANT', g.grant_key
                  FROM new_grant g JOIN account a USING (user_id, pool)
                 ORDER BY g.grant_key
                RETURNING 1
            )
            SELECT count(*) AS granted FROM ledger
            """)
        return try rows[0].decode("granted")
    }

    /// Takes back what remains of a grant, never more than its pool holds now; what cannot be taken
    /// back (already spent) is recorded on the grant as unrecoverable. A second call takes nothing.
    @discardableResult
    public static func revoke(grantKey: String, on db: PostgresConnection) async throws -> CreditRevocation {
        // The grant row first, then its account: the order every writer of both follows.
        let rows = try await db.query(
            """
            SELECT g.user_id, g.pool, g.amount, g.revoked_amount + g.unrecoverable_amount AS taken,
                   (SELECT balance FROM credit_account a WHERE a.user_id = g.user_id AND a.pool = g.pool FOR UPDATE) AS balance
              FROM (SELECT * FROM credit_grant WHERE grant_key = \(grantKey) FOR UPDATE) g
            """)
        guard let row = rows.first else { return CreditRevocation(revoked: 0, unrecoverable: 0) }
        let user: String = try row.decode("user_id")
        let pool: String = try row.decode("pool")
        let taken = CreditRules.revocation(
            granted: try row.decode("amount"), alreadyRevoked: try row.decode("taken"),
            poolBalance: try row.decode("balance", as: Int64?.self) ?? 0)
        guard taken.revoke > 0 || taken.unrecoverable > 0 else { return CreditRevocation(revoked: 0, unrecoverable: 0) }
        try await db.query(
            """
            WITH revoked AS (
                UPDATE credit_grant
                   SET revoked_amount = revoked_amount + \(taken.revoke),
                       unrecoverable_amount = unrecoverable_amount + \(taken.unrecoverable)
                 WHERE grant_key = \(grantKey)
            ), account AS (
                UPDATE credit_account SET balance = balance - \(taken.revoke), updated_at = now()
                 WHERE user_id = \(user) AND pool = \(pool) AND \(taken.revoke) > 0
                RETURNING user_id, pool, balance
            )
            INSERT INTO credit_ledger (user_id, pool, delta, balance_after, entry_type, reference)
            SELECT user_id, pool, -\(taken.revoke)::bigint, balance, 'REVOCATION', \(grantKey) FROM account
            """)
        return CreditRevocation(revoked: taken.revoke, unrecoverable: taken.unrecoverable)
    }

    /// A reversed refund gives back what the revocation took; the unrecoverable part was never
    /// taken, so the grant is simply whole again. Returns the amount given back.
    @discardableResult
    public static func restore(grantKey: String, on db: PostgresConnection) async throws -> MicroCredits {
        let rows = try await db.query(
            """
            SELECT user_id, pool, revoked_amount, unrecoverable_amount FROM credit_grant WHERE grant_key = \(grantKey) FOR UPDATE
            """)
        guard let row = rows.first else { return 0 }
        let revoked: Int64 = try row.decode("revoked_amount")
        let unrecoverable: Int64 = try row.decode("unrecoverable_amount")
        guard revoked > 0 || unrecoverable > 0 else { return 0 }
        let user: String = try row.decode("user_id")
        let pool: String = try row.decode("pool")
        try await db.query(
            """
            WITH restored AS (
                UPDATE credit_grant SET revoked_amount = 0, unrecoverable_amount = 0 WHERE grant_key = \(grantKey)
            ), account AS (
                INSERT INTO credit_account AS a (user_id, pool, balance)
                SELECT \(user), \(pool), \(revoked) WHERE \(revoked) > 0
                ON CONFLICT (user_id, pool) DO UPDATE SET balance = a.balance + EXCLUDED.balance, updated_at = now()
                RETURNING user_id, pool, balance
            )
            INSERT INTO credit_ledger (user_id, pool, delta, balance_after, entry_type, reference)
            SELECT user_id, pool, \(revoked), balance, 'RESTORATION', \(grantKey) FROM account
            """)
        return revoked
    }

    /// A manual adjustment by an operator, credit (`amount` > 0) or debit (< 0), once per adjustment
    /// number: a retry books nothing and answers the first result. A credit is also a grant keyed
    /// by the number; a debit takes at most what the pool holds and records the rest as
    /// unrecoverable. The balance change is one ADJUSTMENT ledger entry (none when a debit finds
    /// the pool empty); every booking gets an audit row.
    @discardableResult
    public static func adjust(
        userID: String, pool: CreditPool, amount: MicroCredits, adjustmentNo: String, operator operatorName: String,
        reason: String, on db: PostgresConnection
    ) async throws -> CreditAdjustment {
        precondition(amount != 0 && amount != .min, "an adjustment changes the balance")
        let request = (userID: userID, pool: pool, amount: amount)
        if let first = try await storedAdjustment(adjustmentNo, matching: request, on: db) { return first }
        guard try await db.query("SELECT 1 FROM app_user WHERE user_id = \(userID)").count == 1 else {
            throw CreditAdjustmentError.unknownUser(userID)
        }
        if amount > 0 {
            // An account to lock, so the balance read below is the one the credit lands on.
            try await db.query(
                """
                INSERT INTO credit_account (user_id, pool, balance) VALUES (\(userID), \(pool.rawValue), 0)
                ON CONFLICT (user_id, pool) DO NOTHING
                """)
        }
        let balance =
            try await db.query(
                "SELECT balance FROM credit_account WHERE user_id = \(userID) AND pool = \(pool.rawValue) FOR UPDATE"
            ).first?.decode("balance", as: Int64.self) ?? 0
        let applied = amount > 0 ? amount : -min(-amount, balance)
        let key = "adjustment:\(adjustmentNo)"
        let rows = try await db.query(
            """
            WITH adjustment AS (
                INSERT INTO credit_adjustment (
                    adjustment_no, user_id, pool, amount, applied, unrecoverable, balance_after, operator, reason)
                VALUES (\(adjustmentNo), \(userID), \(pool.rawValue), \(amount), \(applied), \(applied - amount),
                        \(balance + applied), \(operatorName), \(reason))
                ON CONFLICT (adjustment_no) DO NOTHING
                RETURNING adjustment_no
            ), new_grant AS (
                INSERT INTO credit_grant (grant_key, user_id, pool, amount, reason)
                SELECT \(key), \(userID), \(pool.rawValue), \(amount), 'ADJUSTMENT' FROM adjustment WHERE \(amount) > 0
                ON CONFLICT (grant_key) DO NOTHING
            ), account AS (
                UPDATE credit_account SET balance = balance + \(applied), updated_at = now()
                 WHERE user_id = \(userID) AND pool = \(pool.rawValue) AND \(applied) <> 0 AND EXISTS (SELECT 1 FROM adjustment)
                RETURNING user_id, pool, balance
            ), ledger AS (
                INSERT INTO credit_ledger (user_id, pool, delta, balance_after, entry_type, reference)
                SELECT user_id, pool, \(applied), balance, 'ADJUSTMENT', \(key) FROM account
            ), audit AS (
                INSERT INTO audit_log (operator, action, reason, before, after)
                SELECT \(operatorName), 'CREDITS_ADJUSTED', \(reason),
                       jsonb_build_object('userId', \(userID)::text, 'pool', \(pool.rawValue)::text, 'balance', \(balance)),
                       jsonb_build_object('userId', \(userID)::text, 'pool', \(pool.rawValue)::text, 'balance', \(balance + applied),
                                          'adjustmentNo', \(adjustmentNo)::text, 'amount', \(amount),
                                          'unrecoverable', \(applied - amount))
                  FROM adjustment
            )
            SELECT count(*) AS booked FROM adjustment
            """)
        guard try rows[0].decode("booked", as: Int.self) == 1 else {
            // A concurrent booking of the same number got there first: its result is the answer.
            guard let first = try await storedAdjustment(adjustmentNo, matching: request, on: db) else {
                // Not visible to this transaction's snapshot: a retry of the transaction will see it.
                throw PostgresError.server(
                    sqlState: .serializationFailure, message: "adjustment \(adjustmentNo) was booked concurrently", constraint: nil)
            }
            return first
        }
        return CreditAdjustment(
            adjustmentNo: adjustmentNo, userID: userID, pool: pool, amount: amount, applied: applied,
            unrecoverable: applied - amount, balanceAfter: balance + applied, booked: true)
    }

    /// The first result of an adjustment number, or nil when it is new; throws when it was booked
    /// for another user, pool or amount.
    private static func storedAdjustment(
        _ adjustmentNo: String, matching request: (userID: String, pool: CreditPool, amount: MicroCredits),
        on db: PostgresConnection
    ) async throws -> CreditAdjustment? {
        let rows = try await db.query(
            """
            SELECT user_id, pool, amount, applied, unrecoverable, balance_after
              FROM credit_adjustment WHERE adjustment_no = \(adjustmentNo)
            """)
        guard let row = rows.first else { return nil }
        let poolName: String = try row.decode("pool")
        guard let pool = CreditPool(rawValue: poolName) else {
            throw PostgresError.decoding(column: "pool", reason: "not a credit pool: \(poolName)")
        }
        let first = CreditAdjustment(
            adjustmentNo: adjustmentNo, userID: try row.decode("user_id"), pool: pool, amount: try row.decode("amount"),
            applied: try row.decode("applied"), unrecoverable: try row.decode("unrecoverable"),
            balanceAfter: try row.decode("balance_after"), booked: false)
        guard first.userID == request.userID, first.pool == request.pool, first.amount == request.amount else {
            throw CreditAdjustmentError.numberUsedForAnother(first)
        }
        return first
    }

    /// Accounts whose balance is negative or differs from the sum of their ledger entries (and
    /// ledger entries without an account): must be zero.
    public static func invariantViolations(on db: PostgresConnection) async throws -> Int {
        let rows = try await db.query(
            """
            SELECT count(*) AS violations
              FROM credit_account a
              FULL JOIN (SELECT user_id, pool, sum(delta) AS total FROM credit_ledger GROUP BY user_id, pool) l
                     USING (user_id, pool)
             WHERE coalesce(a.balance, 0) <> coalesce(l.total, 0) OR a.balance < 0
            """)
        return try rows[0].decode("violations")
    }
}
