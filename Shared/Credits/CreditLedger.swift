import Domain
import Foundation
import Postgres
import Storage

/// A grant to book for one user; `decision.grantKey` is unique in the database, so booking it
/// again changes nothing.
public struct CreditGrant: Sendable, Hashable {
    public var userID: String
    public var decision: GrantDecision
    /// The Apple transaction that earned it (nil for welcome credits and adjustments).
    public var environment: String?
    public var transactionID: String?
    public var originalTransactionID: String?
    /// The end of the paid period a SUBSCRIPTION lot came with (nil: never expires).
    public var expiresAt: Date?

    public init(
        userID: String, decision: GrantDecision, environment: String? = nil, transactionID: String? = nil,
        originalTransactionID: String? = nil, expiresAt: Date? = nil
    ) {
        self.userID = userID
        self.decision = decision
        self.environment = environment
        self.transactionID = transactionID
        self.originalTransactionID = originalTransactionID
        self.expiresAt = expiresAt
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
    /// Beyond `CREDITS_MAX_ADJUSTMENT`, or the pool would pass `CREDITS_MAX_BALANCE`.
    case amountOutOfRange(String)
}

/// Grants that would take a pool past `CREDITS_MAX_BALANCE` (or a change past the 64-bit range):
/// the statement booked them with the rest, so the caller's transaction must roll back. Names the
/// pools concerned.
public struct CreditLimitExceeded: Error, Sendable, Hashable, CustomStringConvertible {
    /// `(user, pool)` of each pool that would pass the maximum.
    public var pools: [UserPool]

    public init(pools: [UserPool]) { self.pools = pools }

    /// The code the fulfillment worker and the credit jobs record.
    public static let code = "AMOUNT_OUT_OF_RANGE"

    public var description: String {
        "a grant would take " + pools.map { "\($0.user)/\($0.pool.rawValue)" }.joined(separator: ", ")
            + " past the largest balance (CREDITS_MAX_BALANCE)"
    }

    /// Whether `grant` goes to one of the pools concerned.
    public func concerns(_ grant: CreditGrant) -> Bool { pools.contains(UserPool(user: grant.userID, pool: grant.decision.pool)) }
}

/// One user's pool.
public struct UserPool: Sendable, Hashable {
    public var user: String
    public var pool: CreditPool

    public init(user: String, pool: CreditPool) {
        self.user = user
        self.pool = pool
    }
}

/// Every write to the credit tables. Each function runs on the caller's connection, inside the
/// caller's transaction, so a grant commits or rolls back with the fulfillment that earned it.
/// Every balance change is one ledger entry whose `balance_after` is the new balance; balances
/// never go below zero (the code never asks for it, and a CHECK refuses it anyway). Every grant
/// is a lot (`GrantRecord`) and every change of a balance changes its lots by the same amount;
/// writers lock the account first, then its lots.
public struct CreditLedger: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Books the grants whose keys are new; returns how many were. Throws `CreditLimitExceeded`
    /// when a pool would pass `limits.maxBalance`, having booked the others in the same statement:
    /// the caller's transaction must then roll back (a fulfillment event is set aside; a credit
    /// job records the refusal with `refuse` and books the rest again).
    @discardableResult
    public func grant(_ grants: [CreditGrant], limits: CreditLimits, on db: PostgresConnection) async throws -> Int {
        guard !grants.isEmpty else { return 0 }
        let rows = try await db.query(
            """
            WITH new_grant AS (
                INSERT INTO credit_grant (
                    grant_key, user_id, pool, amount, remaining, reason, environment, transaction_id, original_transaction_id,
                    expires_at)
                SELECT g.key, g.user_id, g.pool, g.amount, g.amount, g.reason, nullif(g.environment, ''),
                       nullif(g.transaction_id, ''), nullif(g.original, ''), g.expires_at
                  FROM unnest(\(PostgresArray(grants.map(\.decision.grantKey)))::text[],
                              \(PostgresArray(grants.map(\.userID)))::text[],
                              \(PostgresArray(grants.map(\.decision.pool.rawValue)))::text[],
                              \(PostgresArray(grants.map(\.decision.amount)))::bigint[],
                              \(PostgresArray(grants.map(\.decision.reason)))::text[],
                              \(PostgresArray(grants.map { $0.environment ?? "" }))::text[],
                              \(PostgresArray(grants.map { $0.transactionID ?? "" }))::text[],
                              \(PostgresArray(grants.map { $0.originalTransactionID ?? "" }))::text[],
                              \(PostgresArray(grants.map(\.expiresAt)))::timestamptz[])
                       AS g(key, user_id, pool, amount, reason, environment, transaction_id, original, expires_at)
                 ORDER BY g.user_id, g.pool
                ON CONFLICT (grant_key) DO NOTHING
                RETURNING user_id, pool, amount, grant_key
            ), account AS (
                -- A pool that would pass the maximum is left as it is (its sum is compared as
                -- numeric, which cannot overflow): its grants find no account below, and the
                -- caller is told which pools those were.
                INSERT INTO credit_account AS a (user_id, pool, balance)
                SELECT user_id, pool, sum(amount) FROM new_grant GROUP BY user_id, pool
                HAVING sum(amount) <= \(limits.maxBalance) ORDER BY user_id, pool
                ON CONFLICT (user_id, pool) DO UPDATE SET balance = a.balance + EXCLUDED.balance, updated_at = now()
                 WHERE a.balance <= \(limits.maxBalance) - EXCLUDED.balance
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
            SELECT (SELECT count(*) FROM ledger) AS granted,
                   (SELECT string_agg(o.user_id || ':' || o.pool, ',')
                      FROM (SELECT user_id, pool FROM new_grant EXCEPT SELECT user_id, pool FROM account) o) AS over_limit
            """)
        if let over = try rows[0].decode("over_limit", as: String?.self) {
            throw CreditLimitExceeded(
                pools: over.split(separator: ",").compactMap { item in
                    // user ids may hold ':'; the pool is the last part.
                    guard let colon = item.lastIndex(of: ":"), let pool = CreditPool(rawValue: String(item[item.index(after: colon)...]))
                    else { return nil }
                    return UserPool(user: String(item[..<colon]), pool: pool)
                })
        }
        return try rows[0].decode("granted")
    }

    /// Books the grants whose keys are new, as `grant`, but records those of a pool that would pass
    /// the maximum as refused (`refuse`) instead of failing the caller's transaction: what a credit
    /// job does, so one user at the maximum never holds up the others. Returns how many were
    /// booked and the refused grants.
    public func grantRefusingOverLimit(_ grants: [CreditGrant], limits: CreditLimits, on db: PostgresConnection)
        async throws -> (booked: Int, refused: [CreditGrant])
    {
        try await db.query("SAVEPOINT credit_grant")
        do {
            let booked = try await grant(grants, limits: limits, on: db)
            try await db.query("RELEASE SAVEPOINT credit_grant")
            return (booked, [])
        } catch let error as CreditLimitExceeded {
            // The statement booked the other pools' grants too: undo it, then book only those. The
            // pools are independent in the statement, so the second one cannot refuse again.
            try await db.query("ROLLBACK TO SAVEPOINT credit_grant")
            let refused = grants.filter(error.concerns)
            try await refuse(refused, code: CreditLimitExceeded.code, on: db)
            return (try await grant(grants.filter { !error.concerns($0) }, limits: limits, on: db), refused)
        }
    }

    /// Records grants a credit job may not book (`CreditLimitExceeded`) with their code, so the job
    /// does not try them again; an operator reads them in `credit_grant_refusal`. Returns how many
    /// were new.
    @discardableResult
    public func refuse(_ grants: [CreditGrant], code: String, on db: PostgresConnection) async throws -> Int {
        guard !grants.isEmpty else { return 0 }
        let rows = try await db.query(
            """
            INSERT INTO credit_grant_refusal (grant_key, user_id, pool, amount, reason, error_code)
            SELECT r.*, \(code)::text
              FROM unnest(\(PostgresArray(grants.map(\.decision.grantKey)))::text[],
                          \(PostgresArray(grants.map(\.userID)))::text[],
                          \(PostgresArray(grants.map(\.decision.pool.rawValue)))::text[],
                          \(PostgresArray(grants.map(\.decision.amount)))::bigint[],
                          \(PostgresArray(grants.map(\.decision.reason)))::text[])
                   AS r(grant_key, user_id, pool, amount, reason)
            ON CONFLICT (grant_key) DO NOTHING
            RETURNING 1
            """)
        return rows.count
    }

    /// A refund of the transaction that earned the lot: takes `percentage` (nil: all) of what
    /// remains of it (`CreditRules.revoke`). A second call takes nothing. Returns what was taken.
    @discardableResult
    public func revoke(grantKey: String, percentage: Int?, on db: PostgresConnection) async throws -> MicroCredits {
        -(try await change(lotsWhere: "grant_key = $1", [grantKey], entryType: "REVOCATION", reference: grantKey, on: db) {
            -CreditRules.revoke(&$0, percentage: percentage)
        })
    }

    /// A reversed refund gives back what the refund took from the lot. Returns the amount given back.
    @discardableResult
    public func restore(grantKey: String, on db: PostgresConnection) async throws -> MicroCredits {
        try await change(lotsWhere: "grant_key = $1", [grantKey], entryType: "RESTORATION", reference: grantKey, on: db) {
            CreditRules.restore(&$0)
        }
    }

    /// Undoes the clearing of a chain's ending (`CreditRules.endingKey`) for `userID`: each lot it
    /// cleared gets back what it took. Returns the amount given back.
    @discardableResult
    public func restoreClearing(ending: String, userID: String, on db: PostgresConnection) async throws -> MicroCredits {
        try await change(
            lotsWhere: "user_id = $1 AND pool = 'SUBSCRIPTION' AND cleared_by = $2", [userID, ending], entryType: "RESTORATION",
            reference: "expiry:\(ending)", on: db
        ) { CreditRules.restoreClearing(&$0, ending: ending) }
    }

    /// Changes the lots selected by `condition` with a pure rule returning each lot's balance
    /// change, then books their sum per pool on the account and the ledger (one entry per pool,
    /// none when nothing changed); returns the total change. The account is locked first, then
    /// the lots.
    private func change(
        lotsWhere condition: String, _ binds: [String], entryType: String, reference: String, on db: PostgresConnection,
        _ rule: (inout GrantRecord) -> MicroCredits
    ) async throws -> MicroCredits {
        let binds = binds.map(\.postgresData)
        let owners = try await db.query(
            PostgresQuery(unsafeSQL: "SELECT DISTINCT user_id, pool FROM credit_grant WHERE \(condition)", binds: binds))
        var total: MicroCredits = 0
        for owner in owners {
            let user: String = try owner.decode("user_id")
            let pool: String = try owner.decode("pool")
            try await db.query("SELECT 1 FROM credit_account WHERE user_id = \(user) AND pool = \(pool) FOR UPDATE")
            let rows = try await db.query(
                PostgresQuery(
                    unsafeSQL: """
                        SELECT id, \(Self.lotColumns) FROM credit_grant
                         WHERE \(condition) AND user_id = $\(binds.count + 1) AND pool = $\(binds.count + 2) ORDER BY id FOR UPDATE
                        """,
                    binds: binds + [user.postgresData, pool.postgresData]))
            var ids: [Int64] = []
            var lots: [GrantRecord] = []
            var delta: MicroCredits = 0
            for row in rows {
                var lot = try Self.lot(row)
                // Each lot gives back at most what it was granted, but many lots of a pool that an
                // operator filled past the bounds could add up beyond the 64-bit range.
                let (sum, overflow) = delta.addingReportingOverflow(rule(&lot))
                guard !overflow else { throw CreditLimitExceeded(pools: [UserPool(user: user, pool: lot.pool)]) }
                delta = sum
                ids.append(try row.decode("id"))
                lots.append(lot)
            }
            guard !lots.isEmpty else { continue }
            try await db.query(
                """
                WITH lots AS (
                    UPDATE credit_grant g
                       SET remaining = l.remaining, revoked = l.revoked, revoked_amount = l.revoked_amount,
                           unrecoverable_amount = l.unrecoverable_amount, cleared_amount = l.cleared_amount,
                           cleared_by = nullif(l.cleared_by, '')
                      FROM unnest(\(PostgresArray(ids))::bigint[], \(PostgresArray(lots.map(\.remaining)))::bigint[],
                                  \(PostgresArray(lots.map(\.revoked)))::boolean[],
                                  \(PostgresArray(lots.map(\.revokedAmount)))::bigint[],
                                  \(PostgresArray(lots.map(\.unrecoverableAmount)))::bigint[],
                                  \(PostgresArray(lots.map(\.clearedAmount)))::bigint[],
                                  \(PostgresArray(lots.map { $0.clearedBy ?? "" }))::text[])
                           AS l(id, remaining, revoked, revoked_amount, unrecoverable_amount, cleared_amount, cleared_by)
                     WHERE g.id = l.id
                ), account AS (
                    UPDATE credit_account SET balance = balance + \(delta), updated_at = now()
                     WHERE user_id = \(user) AND pool = \(pool) AND \(delta) <> 0
                    RETURNING user_id, pool, balance
                )
                INSERT INTO credit_ledger (user_id, pool, delta, balance_after, entry_type, reference)
                SELECT user_id, pool, \(delta)::bigint, balance, \(entryType), \(reference) FROM account
                """)
            total = Credits.total([total, delta])
        }
        return total
    }

    /// Burns each amount from its user's pool's lots, the lot granted first used first
    /// (`CreditRules.burn`; several burns of one pool add up), in one statement however many: the
    /// daily close burns for a whole batch of users (100,000 users' day: 7.4 s; with a statement per
    /// burn, the SQL function `credit_burn_lots` kept for the usage function, 37.8 s in a loaded
    /// run). Call it holding the accounts' locks.
    public func burnLots(_ burns: [(user: String, pool: CreditPool, amount: MicroCredits)], on db: PostgresConnection)
        async throws
    {
        guard !burns.isEmpty else { return }
        try await db.query(
            """
            WITH wanted AS (
                SELECT b.user_id, b.pool, sum(b.amount) AS amount
                  FROM unnest(\(PostgresArray(burns.map(\.user)))::text[], \(PostgresArray(burns.map(\.pool.rawValue)))::text[],
                              \(PostgresArray(burns.map(\.amount)))::bigint[]) AS b(user_id, pool, amount)
                 WHERE b.amount > 0
                 GROUP BY b.user_id, b.pool
            ), lot AS (
                SELECT c.id, c.remaining, w.amount,
                       sum(c.remaining) OVER (PARTITION BY c.user_id, c.pool ORDER BY c.id) - c.remaining AS before
                  FROM wanted w JOIN credit_grant c ON c.user_id = w.user_id AND c.pool = w.pool AND c.remaining > 0
            )
            UPDATE credit_grant g SET remaining = g.remaining - least(l.remaining, l.amount - l.before)
              FROM lot l
             WHERE g.id = l.id AND l.before < l.amount
            """)
    }

    /// Books ledger entries in order (ids follow the array order) for balance changes a job wrote
    /// with `setBalances` or `clearChainLots`.
    func insert(_ entries: LedgerEntries, on db: PostgresConnection) async throws {
        guard !entries.userIDs.isEmpty else { return }
        try await db.query(
            """
            INSERT INTO credit_ledger (user_id, pool, delta, balance_after, entry_type, reference)
            SELECT * FROM unnest(\(PostgresArray(entries.userIDs))::text[], \(PostgresArray(entries.pools))::text[],
                                 \(PostgresArray(entries.deltas))::bigint[], \(PostgresArray(entries.after))::bigint[],
                                 \(PostgresArray(entries.types))::text[], \(PostgresArray(entries.references))::text[])
            """)
    }

    /// The daily close's settlement: the new balances of the pools it drew from, the burns of their
    /// lots and their ledger entries, under the accounts' locks the caller holds.
    func settle(
        balances: [(user: String, pool: CreditPool, balance: MicroCredits)],
        burns: [(user: String, pool: CreditPool, amount: MicroCredits)], entries: LedgerEntries, on db: PostgresConnection
    ) async throws {
        if !balances.isEmpty {
            try await db.query(
                """
                UPDATE credit_account a SET balance = n.balance, updated_at = now()
                  FROM unnest(\(PostgresArray(balances.map(\.user)))::text[], \(PostgresArray(balances.map(\.pool.rawValue)))::text[],
                              \(PostgresArray(balances.map(\.balance)))::bigint[]) AS n(user_id, pool, balance)
                 WHERE a.user_id = n.user_id AND a.pool = n.pool
                """)
        }
        try await burnLots(burns, on: db)
        try await insert(entries, on: db)
    }

    /// Clears the SUBSCRIPTION lots of chains that truly ended, each lot remembering what the
    /// clearing took and which ending took it (`CreditRules.clear`), so that a reversed refund
    /// gives exactly that back; the pools lose what the lots held, with their ledger entries. The
    /// caller holds the accounts' locks and read what each chain's lots hold (`amounts`).
    func clearChainLots(_ chains: ClearedChains, entries: LedgerEntries, on db: PostgresConnection) async throws {
        guard chains.count > 0 else { return }
        try await db.query(
            """
            WITH c AS MATERIALIZED (
                SELECT * FROM unnest(\(PostgresArray(chains.users))::text[], \(PostgresArray(chains.environments))::text[],
                                     \(PostgresArray(chains.originals))::text[], \(PostgresArray(chains.endings))::text[],
                                     \(PostgresArray(chains.amounts))::bigint[]) AS c(user_id, environment, original, ending, amount)
            ), emptied AS (
                UPDATE credit_account a SET balance = a.balance - t.amount, updated_at = now()
                  FROM (SELECT user_id, sum(amount)::bigint AS amount FROM c GROUP BY user_id) t
                 WHERE a.pool = 'SUBSCRIPTION' AND a.user_id = t.user_id
            )
            UPDATE credit_grant g SET cleared_amount = g.remaining, cleared_by = c.ending, remaining = 0
              FROM c
             WHERE g.environment = c.environment AND g.original_transaction_id = c.original AND g.user_id = c.user_id
               AND g.pool = 'SUBSCRIPTION' AND g.remaining > 0
            """)
        try await insert(entries, on: db)
    }

    /// The columns of a lot, as `lot(_:)` reads them.
    static let lotColumns = """
        grant_key, user_id, pool, amount, remaining, revoked, revoked_amount, unrecoverable_amount, cleared_amount, cleared_by
        """

    /// A lot from a row of `lotColumns`.
    static func lot(_ row: PostgresRow) throws -> GrantRecord {
        let poolName: String = try row.decode("pool")
        guard let pool = CreditPool(rawValue: poolName) else {
            throw PostgresError.decoding(column: "pool", reason: "not a credit pool: \(poolName)")
        }
        return GrantRecord(
            grantKey: try row.decode("grant_key"), userID: try row.decode("user_id"), pool: pool, amount: try row.decode("amount"),
            remaining: try row.decode("remaining", as: Int64.self), revoked: try row.decode("revoked"),
            revokedAmount: try row.decode("revoked_amount"), unrecoverableAmount: try row.decode("unrecoverable_amount"),
            clearedAmount: try row.decode("cleared_amount"), clearedBy: try row.decode("cleared_by", as: String?.self))
    }

    /// A manual adjustment by an operator, credit (`amount` > 0) or debit (< 0), once per adjustment
    /// number: a retry books nothing and answers the first result. A credit is also a grant keyed
    /// by the number; a debit takes at most what the pool holds and records the rest as
    /// unrecoverable. The balance change is one ADJUSTMENT ledger entry (none when a debit finds
    /// the pool empty); every booking gets an audit row.
    @discardableResult
    public func adjust(
        userID: String, pool creditPool: CreditPool, amount: MicroCredits, adjustmentNo: String, operator operatorName: String,
        reason: String, limits: CreditLimits
    ) async throws -> CreditAdjustment {
        try await pool.transaction { db in
            try await adjust(
                userID: userID, pool: creditPool, amount: amount, adjustmentNo: adjustmentNo, operator: operatorName, reason: reason,
                limits: limits, on: db)
        }
    }

    /// The same inside the caller's transaction.
    @discardableResult
    public func adjust(
        userID: String, pool: CreditPool, amount: MicroCredits, adjustmentNo: String, operator operatorName: String,
        reason: String, limits: CreditLimits, on db: PostgresConnection
    ) async throws -> CreditAdjustment {
        guard amount != 0 else { throw CreditAdjustmentError.amountOutOfRange("an adjustment changes the balance") }
        if let problem = limits.adjustmentProblem(amount, onto: 0) { throw CreditAdjustmentError.amountOutOfRange(problem) }
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
        // Checked against the balance under its lock; both are bounded now, so the sums below fit.
        if let problem = limits.adjustmentProblem(amount, onto: balance) { throw CreditAdjustmentError.amountOutOfRange(problem) }
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
                INSERT INTO credit_grant (grant_key, user_id, pool, amount, remaining, reason)
                SELECT \(key), \(userID), \(pool.rawValue), \(amount), \(amount), 'ADJUSTMENT' FROM adjustment WHERE \(amount) > 0
                ON CONFLICT (grant_key) DO NOTHING
            ), account AS (
                UPDATE credit_account SET balance = balance + \(applied), updated_at = now()
                 WHERE user_id = \(userID) AND pool = \(pool.rawValue) AND \(applied) <> 0 AND EXISTS (SELECT 1 FROM adjustment)
                RETURNING user_id, pool, balance
            ), ledger AS (
                INSERT INTO credit_ledger (user_id, pool, delta, balance_after, entry_type, reference)
                SELECT user_id, pool, \(applied), balance, 'ADJUSTMENT', \(key) FROM account
            )
            SELECT count(*) AS booked FROM adjustment
            """)
        let booked = try rows[0].decode("booked", as: Int.self) == 1
        if booked {
            if applied < 0 { try await burnLots([(userID, pool, -applied)], on: db) }
            try await announceAdjustment(userID: userID, pool: pool, applied: applied, key: key, on: db)
            try await AuditLog(pool: self.pool).record(
                on: db, operator: operatorName, action: "CREDITS_ADJUSTED", reason: reason,
                before: AdjustmentAudit(userId: userID, pool: pool.rawValue, balance: balance),
                after: AdjustmentAudit(
                    userId: userID, pool: pool.rawValue, balance: balance + applied, adjustmentNo: adjustmentNo, amount: amount,
                    unrecoverable: applied - amount))
        }
        guard booked else {
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
    private func storedAdjustment(
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

    /// Accounts whose balance is negative or differs from the sum of their ledger entries or from
    /// the sum of their lots' remaining amounts (and ledger entries or lots without an account):
    /// must be zero.
    public func invariantViolations(on db: PostgresConnection) async throws -> Int {
        let rows = try await db.query(
            """
            SELECT count(*) AS violations
              FROM credit_account a
              FULL JOIN (SELECT user_id, pool, sum(delta) AS total FROM credit_ledger GROUP BY user_id, pool) l
                     USING (user_id, pool)
              FULL JOIN (SELECT user_id, pool, sum(remaining) AS remaining FROM credit_grant GROUP BY user_id, pool) g
                     USING (user_id, pool)
             WHERE coalesce(a.balance, 0) <> coalesce(l.total, 0) OR coalesce(a.balance, 0) <> coalesce(g.remaining, 0)
                OR a.balance < 0
            """)
        return try rows[0].decode("violations")
    }
}

/// A pool before and after an adjustment, as its audit row shows it.
private struct AdjustmentAudit: Encodable, Sendable {
    var userId: String
    var pool: String
    var balance: MicroCredits
    var adjustmentNo: String? = nil
    var amount: MicroCredits? = nil
    var unrecoverable: MicroCredits? = nil
}

// The outbound events of the ledger's own writers (the credit jobs, adjustments); fulfillment
// plans its grants' events itself (`FulfillmentEvents`).
extension CreditLedger {
    /// Appends `credits.granted` for booked `grants` on the caller's transaction; a grant booked
    /// before has its event already (keyed by the grant), so passing it again adds nothing.
    public func announceGranted(_ grants: [CreditGrant], now: Date, on db: PostgresConnection) async throws {
        let events = grants.map { grant in
            CreditEvents.granted(
                userID: grant.userID, environment: grant.environment ?? "Production", grantKey: grant.decision.grantKey,
                pool: grant.decision.pool, amount: grant.decision.amount, reason: grant.decision.reason,
                originalTransactionID: grant.originalTransactionID, transactionID: grant.transactionID, now: now)
        }
        try await OutboundEventStore(pool: pool).append(events, on: db)
    }

    /// An adjustment's event: `credits.granted` for a credit, `credits.revoked` for what a debit took.
    private func announceAdjustment(userID: String, pool: CreditPool, applied: MicroCredits, key: String, on db: PostgresConnection)
        async throws
    {
        guard applied != 0 else { return }
        let type: OutboundEventType = applied > 0 ? .creditsGranted : .creditsRevoked
        let event = CreditEvents.event(
            type, key: "\(type.rawValue):\(key)", userID: userID, environment: "Production", grantKey: applied > 0 ? key : nil,
            pool: pool, amount: applied > 0 ? applied : -applied, reason: "ADJUSTMENT",
            originalTransactionID: nil, transactionID: nil, now: Date())
        try await OutboundEventStore(pool: self.pool).append([event], on: db)
    }
}
