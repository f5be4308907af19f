import Domain
import Foundation
import Postgres
import ServiceRuntime

extension CreditJobs {
    /// The months of one chain's current period that fell due by `now` and are not granted yet,
    /// each with the moment it fell due.
    struct DuePlanMonths {
        var environment: String
        var original: String
        var transactionID: String
        var months: [(grant: CreditGrant, dueAt: Date)]
    }

    /// The months of periods longer than a month (P2M…P1Y plans, and pay-up-front or free
    /// offers covering several months) that are due by `now`: month i on
    /// the anchor day of the i-th month after the purchase (UTC, clamped to the month's end), for
    /// every month of the period, while the subscription is ACTIVE or in GRACE and the transaction is not revoked;
    /// only for periods whose first month was granted (trials and family sharing follow the
    /// product's configuration through it). Each month once (its grant key).
    /// Read without locks: the grant checks again under them.
    ///
    /// Candidates come from the two sides that can have months due, each through its own index
    /// (never from every paid chain: most are monthly): chains whose current product is a longer
    /// plan, and transactions of the last 13 months with an offer period (none is longer than a
    /// year).
    func duePlanMonths(now: Date) async throws -> [DuePlanMonths] {
        let candidates = try await pool.query(
            """
            WITH candidate AS (
                SELECT s.environment, s.original_transaction_id, s.last_transaction_id
                  FROM user_subscription s
                 WHERE s.status IN ('ACTIVE', 'GRACE') AND s.frozen_reason IS NULL
                   AND s.active_product_id = ANY(ARRAY(
                           SELECT product_id FROM payment_product
                            WHERE channel = 'APPLE' AND app_key = \(appKey) AND duration NOT IN ('P1W', 'P1M')))
                UNION
                SELECT t.environment, t.original_transaction_id, t.transaction_id
                  FROM apple_transaction t
                 WHERE t.offer_period IS NOT NULL AND t.purchase_date > \(now)::timestamptz - interval '13 months'
            )
            SELECT s.environment, s.original_transaction_id, s.user_id, t.transaction_id, t.purchase_date, t.expires_date,
                   p.credits_amount, p.duration, t.offer_discount_type, t.offer_period,
                   (SELECT string_agg(g.grant_key, ',') FROM credit_grant g
                     WHERE g.environment = t.environment AND g.transaction_id = t.transaction_id) AS granted,
                   (SELECT string_agg(r.grant_key, ',') FROM credit_grant_refusal r
                     WHERE r.grant_key LIKE 'period:' || t.environment || ':' || t.transaction_id || ':m%') AS refused
              FROM candidate c
              JOIN user_subscription s ON s.environment = c.environment AND s.original_transaction_id = c.original_transaction_id
                                      AND s.last_transaction_id = c.last_transaction_id
              JOIN apple_transaction t ON t.environment = s.environment AND t.transaction_id = s.last_transaction_id
              JOIN payment_product p ON p.channel = 'APPLE' AND p.app_key = \(appKey) AND p.product_id = t.product_id
             WHERE s.status IN ('ACTIVE', 'GRACE') AND s.frozen_reason IS NULL AND (p.duration NOT IN ('P1W', 'P1M') OR t.offer_period IS NOT NULL)
               AND t.revocation_date IS NULL AND t.purchase_date <= \(now)
               AND (SELECT count(*) FROM credit_grant g
                     WHERE g.environment = t.environment AND g.transaction_id = t.transaction_id) >= 1
            """)
        var chains: [DuePlanMonths] = []
        for row in candidates {
            let environment: String = try row.decode("environment")
            let transactionID: String = try row.decode("transaction_id")
            let granted = Set((try row.decode("granted", as: String?.self) ?? "").split(separator: ",").map(String.init))
            guard granted.contains(CreditRules.periodGrantKey(environment: environment, transactionID: transactionID, monthIndex: 0))
            else { continue }
            // A month refused at the maximum balance is done too: it is recorded, not tried again.
            let existing = granted.union((try row.decode("refused", as: String?.self) ?? "").split(separator: ",").map(String.init))
            guard let duration = ProductDuration(rawValue: try row.decode("duration")),
                let months = CreditRules.periodMonths(
                    offerDiscountType: try row.decode("offer_discount_type", as: String?.self),
                    offerPeriod: try row.decode("offer_period", as: String?.self),
                    duration: duration),
                months > 1, existing.count < months
            else { continue }
            let expires = try row.decode("expires_date", as: Date?.self)
            let dates = CreditRules.monthlyGrantDates(purchase: try row.decode("purchase_date"), months: months, expires: expires)
            let amount = Credits.micro(try row.decode("credits_amount"))
            let user: String = try row.decode("user_id")
            let original: String = try row.decode("original_transaction_id")
            let due = dates.enumerated().dropFirst().filter { $0.element <= now }.map { month in
                (
                    grant: CreditGrant(
                        userID: user,
                        decision: GrantDecision(
                            grantKey: CreditRules.periodGrantKey(environment: environment, transactionID: transactionID, monthIndex: month.offset),
                            pool: .subscription, amount: amount, reason: "PLAN_MONTH"),
                        environment: environment, transactionID: transactionID, originalTransactionID: original,
                        expiresAt: expires),
                    dueAt: month.element
                )
            }.filter { !existing.contains($0.grant.decision.grantKey) }
            guard amount > 0, !due.isEmpty else { continue }
            chains.append(DuePlanMonths(environment: environment, original: original, transactionID: transactionID, months: due))
        }
        return chains
    }

    /// How far behind the credit jobs are at `now`: plan months that fell due more than `grace` ago
    /// and are not granted, and subscription pools whose clearing fell due more than `grace` ago
    /// and is not done (a backlog gauge: each job catches up at its next run).
    public func overdue(now: Date, grace: Duration) async throws -> (planMonths: Int, expiryClearings: Int) {
        let late = now - grace.inSeconds
        let months = try await duePlanMonths(now: now).flatMap(\.months).filter { $0.dueAt < late }.count
        return (months, try await overdueClearings(before: UTCDay(containing: late).start))
    }

    /// Grants the plan months due by `now` (`duePlanMonths`), each once. Returns the number granted.
    @discardableResult
    public func grantPlanMonths(now: Date, wait: Bool = true) async throws -> Int {
        var granted = 0
        for chain in try await duePlanMonths(now: now) {
            let (environment, original, transactionID) = (chain.environment, chain.original, chain.transactionID)
            let due = chain.months.map(\.grant)
            let booked = try await batch(wait: wait) { db -> Int in
                // The chain lock of fulfillment (same expression): a refund or a plan change of this
                // chain is either seen here or comes after, and then revokes these grants too.
                try await db.query("SELECT pg_advisory_xact_lock(hashtextextended(\(environment)::text || '/' || \(original)::text, 0))")
                let still = try await db.query(
                    """
                    SELECT 1 FROM user_subscription s JOIN apple_transaction t
                        ON t.environment = s.environment AND t.transaction_id = s.last_transaction_id
                     WHERE s.environment = \(environment) AND s.original_transaction_id = \(original)
                       AND s.last_transaction_id = \(transactionID) AND s.status IN ('ACTIVE', 'GRACE')
                       AND s.frozen_reason IS NULL AND t.revocation_date IS NULL
                    """)
                guard !still.isEmpty else { return 0 }
                let (booked, refused) = try await ledger.grantRefusingOverLimit(due, limits: configuration.limits, on: db)
                recordRefusals(refused)
                let refusedKeys = Set(refused.map(\.decision.grantKey))
                try await ledger.announceGranted(due.filter { !refusedKeys.contains($0.decision.grantKey) }, now: now, on: db)
                return booked
            }
            granted += booked ?? 0
        }
        metrics.monthlyGrants.increment(by: granted)
        if granted > 0 { logger.info("plan months granted", ["credits.grants": .int(Int64(granted))]) }
        return granted
    }
}
