import Credits
import Domain
import Foundation
import FulfillmentApp
import Postgres
import Storage
import TestSupport
import Testing

/// The clock on PostgreSQL: the SQL rule is the Swift one, reads and spending use the status at
/// their instant before the job runs, and the job advances each due row once with its history and
/// events, however many runners.
@Suite(.timeLimit(.minutes(3))) struct SubscriptionClockTests {
    static let credit: MicroCredits = 1_000_000
    /// Long enough that the first spend lands inside the period on a loaded CI machine (5 s did not).
    static let period: TimeInterval = 20

    /// `subscription_status_at` answers what `SubscriptionTimeline.status(at:stored:nextChangeAt:)`
    /// answers, over a grid of stored statuses, moments and facts (a commitment's end among them).
    @Test func theSQLRuleIsTheSwiftRule() async throws {
        try await withTestDatabase("clock") { database in
            let at = Date(timeIntervalSince1970: 1_767_225_600)
            let moments: [Date?] = [nil, at - 61 * 86_400, at - 60 * 86_400, at - 86_400, at - 1, at, at + 1, at + 86_400]
            var cases: [(stored: SubscriptionStatus, next: Date?, timeline: SubscriptionTimeline)] = []
            for stored in SubscriptionStatus.allCases {
                for next in [nil, at - 1, at, at + 1] {
                    for expires in moments {
                        for grace in moments {
                            for retry in [false, true] {
                                for autoRenew in [false, true] {
                                    for commitmentEnd in [nil, at - 86_400, at + 86_400] {
                                        cases.append(
                                            (
                                                stored, next,
                                                SubscriptionTimeline(
                                                    revoked: stored == .revoked, expiresAt: expires, graceExpiresAt: grace,
                                                    inBillingRetry: retry, autoRenewEnabled: autoRenew,
                                                    commitmentEndsAt: commitmentEnd)
                                            ))
                                    }
                                }
                            }
                        }
                    }
                }
            }
            let rows = try await database.pool.query(
                """
                SELECT subscription_status_at(c.status, c.next, c.expires, c.grace, c.retry, c.auto_renew, c.commitment_ends,
                                              \(at)) AS status
                  FROM unnest(\(PostgresArray(cases.map(\.stored.rawValue)))::text[], \(PostgresArray(cases.map(\.next)))::timestamptz[],
                              \(PostgresArray(cases.map(\.timeline.expiresAt)))::timestamptz[],
                              \(PostgresArray(cases.map(\.timeline.graceExpiresAt)))::timestamptz[],
                              \(PostgresArray(cases.map(\.timeline.inBillingRetry)))::boolean[],
                              \(PostgresArray(cases.map(\.timeline.autoRenewEnabled)))::boolean[],
                              \(PostgresArray(cases.map(\.timeline.commitmentEndsAt)))::timestamptz[])
                       WITH ORDINALITY AS c(status, next, expires, grace, retry, auto_renew, commitment_ends, n)
                 ORDER BY c.n
                """)
            #expect(rows.count == cases.count)
            var mismatches = 0
            for (row, c) in zip(rows, cases) {
                let sql = try row.decode("status", as: String.self)
                let swift = c.timeline.status(at: at, stored: c.stored, nextChangeAt: c.next).rawValue
                if sql != swift {
                    mismatches += 1
                    if mismatches < 5 { Issue.record("\(c): SQL \(sql), Swift \(swift)") }
                }
            }
            #expect(mismatches == 0)
        }
    }

    /// Measured: Apple's renewal fails a moment before the period ends (billing retry, no grace).
    /// At the end of the period, before any job runs, REST says BILLING_RETRY and the SUBSCRIPTION
    /// pool is no longer spent; the job then stores it, with its history and event.
    @Test func aFailureBeforeExpiryBecomesBillingRetryAtExpiry() async throws {
        try await withTestDatabase("clock") { database in
            let chain = try await Self.seed(database.pool, user: "ann", original: "7100", period: Self.period, failure: true, autoRenew: true)
            #expect(
                try await Self.use(database.pool, "ann") == PoolAmounts([.subscription: Self.credit]),
                "paid: the pool is spent (\(chain.expiresAt!.timeIntervalSinceNow) s of the period left)")
            try await Self.waitPast(chain.expiresAt!)

            #expect(try await Self.statusNow(database.pool, "ann") == .billingRetry, "REST before the job runs")
            #expect(try await Self.use(database.pool, "ann") == PoolAmounts([.welcome: Self.credit]), "the pool is kept, not spent")
            #expect(try await Self.storedStatus(database.pool, "7100") == "ACTIVE", "the job has not run yet")

            #expect(try await SubscriptionClock(pool: database.pool).advance(now: Date()) == 1)
            #expect(try await Self.storedStatus(database.pool, "7100") == "BILLING_RETRY")
            #expect(
                try await database.count(
                    "SELECT count(*) FROM status_history WHERE entity_key = 'Sandbox:7100' AND previous_status = 'ACTIVE' AND current_status = 'BILLING_RETRY' AND cause = 'CLOCK'"
                ) == 1)
            #expect(
                try await database.count(
                    "SELECT count(*) FROM outbound_event WHERE user_id = 'ann' AND type = 'entitlement.billing_issue' AND data->>'status' = 'BILLING_RETRY'"
                ) == 1)
            #expect(try await SubscriptionClock(pool: database.pool).advance(now: Date()) == 0, "nothing due until the retries end")
        }
    }

    /// Measured: auto-renew off, the period ends, Apple's EXPIRED has not come: REST says EXPIRED
    /// and the pool is not spent, before and after the job.
    @Test func autoRenewOffExpiresAtExpiryWithoutApple() async throws {
        try await withTestDatabase("clock") { database in
            let chain = try await Self.seed(database.pool, user: "bob", original: "7200", period: Self.period, failure: false, autoRenew: false)
            #expect(try await Self.use(database.pool, "bob") == PoolAmounts([.subscription: Self.credit]))
            try await Self.waitPast(chain.expiresAt!)

            #expect(try await Self.statusNow(database.pool, "bob") == .expired)
            #expect(try await Self.use(database.pool, "bob") == PoolAmounts([.welcome: Self.credit]))
            #expect(try await SubscriptionClock(pool: database.pool).advance(now: Date()) == 1)
            #expect(try await Self.storedStatus(database.pool, "7200") == "EXPIRED")
            #expect(try await database.count("SELECT count(*) FROM outbound_event WHERE type = 'entitlement.expired'") == 1)
            #expect(try await database.count("SELECT count(*) FROM user_subscription WHERE next_change_at IS NOT NULL") == 0)
        }
    }

    /// A monthly charge of a 12-month commitment whose subscriber turned auto-renew off in that
    /// month, and Apple's next charge failing: the clock is moved (reads and the job at later
    /// instants) past the month's end, the grace period and Apple's 60 days of retries. At the
    /// month's end the plan is in GRACE, not EXPIRED, its entitlement active and renewing; then
    /// BILLING_RETRY; EXPIRED only when Apple's retries end. The commitment's last month with
    /// auto-renew off ends at the commitment's end, by the clock alone.
    @Test func aCancellationInsideTheCommitmentFollowsTheCommitmentAsTheClockMoves() async throws {
        try await withTestDatabase("clock") { database in
            let pool = database.pool
            let day: TimeInterval = 86_400
            let now = Date()
            try await pool.query(
                """
                INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration,
                                             credits_amount, billing_plan_type)
                VALUES ('com.example.subscriptions', 'plan', 'group', 'pro', 1, 'P1Y', 10, 'MONTHLY')
                """)
            // Charge 3 of 12, paid ten days ago, its month ending in 20 days; the commitment ends in 290.
            let commitmentEnd = now + 290 * day
            let third = try await Self.seedCommitment(
                pool, user: "cora", original: "7300", charge: 3, purchase: now - 10 * day, expires: now + 20 * day,
                commitmentEnd: commitmentEnd, failureGrace: now + 36 * day)
            #expect(third.status == .active && !third.autoRenewEnabled && third.commitmentEndsAt == commitmentEnd)
            #expect(
                try await database.count(
                    "SELECT count(*) FROM user_subscription WHERE original_transaction_id = '7300' AND commitment_ends_at IS NOT NULL") == 1)
            let monthEnd = try #require(third.expiresAt)
            let subscriptions = SubscriptionStore(pool: pool)
            let entitlements = EntitlementStore(pool: pool)
            let clock = SubscriptionClock(pool: pool)

            // The month's end: awaiting the next charge, which failed: grace, still entitled.
            let inGrace = monthEnd + 3600
            #expect(try await subscriptions.subscriptions(userID: "cora").first?.status(at: inGrace) == .grace, "reads before the job")
            let items = try await entitlements.entitlements(userID: "cora", now: inGrace)
            #expect(items.map(\.entitlement) == ["pro"])
            #expect(items.first?.active == true && items.first?.willRenew == true, "the commitment continues")
            #expect(try await clock.advance(now: inGrace) == 1)
            #expect(try await Self.storedStatus(pool, "7300") == "GRACE")

            // Past Apple's grace: billing retry; past its 60 days of retries: expired.
            let inRetry = now + 37 * day
            #expect(try await subscriptions.subscriptions(userID: "cora").first?.status(at: inRetry) == .billingRetry)
            #expect(try await clock.advance(now: inRetry) == 1)
            #expect(try await Self.storedStatus(pool, "7300") == "BILLING_RETRY")
            #expect(try await database.count("SELECT count(*) FROM outbound_event WHERE type = 'entitlement.expired'") == 0)
            let retriesOver = monthEnd + SubscriptionTimeline.billingRetryWindow + 3600
            #expect(try await clock.advance(now: retriesOver) == 1)
            #expect(try await Self.storedStatus(pool, "7300") == "EXPIRED")
            #expect(try await database.count("SELECT count(*) FROM outbound_event WHERE type = 'entitlement.expired'") == 1)

            // The last charge, auto-renew still off: the plan ends with the commitment.
            let last = try await Self.seedCommitment(
                pool, user: "dora", original: "7400", charge: 12, purchase: now - 25 * day, expires: now + 5 * day,
                commitmentEnd: now + 5 * day, failureGrace: nil)
            #expect(last.commitmentEndsAt == nil && !last.willRenew)
            #expect(try await clock.advance(now: now + 5 * day - 3600) == 0, "nothing due before the end")
            #expect(try await entitlements.entitlements(userID: "dora", now: now + 4 * day).first?.willRenew == false)
            #expect(try await clock.advance(now: now + 5 * day + 1) == 1)
            #expect(try await Self.storedStatus(pool, "7400") == "EXPIRED")
            #expect(
                try await database.count(
                    "SELECT count(*) FROM user_subscription WHERE original_transaction_id = '7400' AND next_change_at IS NULL") == 1)
        }
    }

    /// Two runners at once, in small batches: every due row is advanced exactly once.
    @Test func twoRunnersAdvanceEachRowOnce() async throws {
        try await withTestDatabase("clock") { database in
            let pool = database.pool
            try await pool.query("INSERT INTO app_user (user_id) VALUES ('many')")
            try await pool.query(
                """
                INSERT INTO user_subscription (environment, original_transaction_id, user_id, active_product_id, status,
                    auto_renew_enabled, expires_at, last_transaction_id, last_signed_date, in_billing_retry, next_change_at)
                SELECT 'Sandbox', 'c' || i, 'many', 'plan', 'ACTIVE', true, now() - interval '1 hour', 'c' || i, now(),
                       i % 2 = 0, now() - interval '1 hour'
                  FROM generate_series(1, 300) AS i
                """)
            let now = Date()
            async let first = SubscriptionClock(pool: pool, batchSize: 20).advance(now: now)
            async let second = SubscriptionClock(pool: pool, batchSize: 20).advance(now: now)
            let (a, b) = try await (first, second)
            #expect(a + b == 300)
            #expect(try await database.count("SELECT count(*) FROM user_subscription WHERE version = 2") == 300, "each row once")
            #expect(try await database.count("SELECT count(*) FROM status_history WHERE cause = 'CLOCK'") == 300)
            #expect(try await database.count("SELECT count(*) FROM user_subscription WHERE status = 'BILLING_RETRY'") == 150)
            #expect(try await database.count("SELECT count(*) FROM user_subscription WHERE status = 'EXPIRED'") == 150)
            #expect(try await SubscriptionClock(pool: pool).lag(now: Date()) == 0)
        }
    }

    /// The lapsed-chain scan also asks Apple about chains whose moment passed in silence: auto-renew
    /// off with no EXPIRED, billing retry past its grace or its 60 days with no word; not the
    /// chains Apple spoke of since, nor those whose moment has not come.
    @Test func theLapsedChainScanCoversAutoRenewOffAndBillingRetry() async throws {
        try await withTestDatabase("clock") { database in
            let pool = database.pool
            let day: TimeInterval = 86_400
            let now = Date()
            try await pool.query("INSERT INTO app_user (user_id) VALUES ('lee')")
            // (chain, auto-renew, expires, in retry, grace end, renewal info signed)
            let chains: [(String, Bool, Date, Bool, Date?, Date)] = [
                ("off-silent", false, now - 7200, false, nil, now - 2 * day),
                ("off-told", false, now - 7200, false, nil, now - 3600),
                ("off-running", false, now + day, false, nil, now - 2 * day),
                ("retry-over", true, now - 61 * day, true, nil, now - 62 * day),
                ("retry-running", true, now - 10 * day, true, nil, now - 11 * day),
                ("grace-over", true, now - 10 * day, true, now - day, now - 11 * day),
                ("grace-told", true, now - 10 * day, true, now - day, now - 3600),
            ]
            for (chain, autoRenew, expires, retry, grace, signed) in chains {
                try await pool.query(
                    """
                    INSERT INTO user_subscription (environment, original_transaction_id, user_id, active_product_id, status,
                        auto_renew_enabled, expires_at, last_transaction_id, last_signed_date)
                    VALUES ('Production', \(chain), 'lee', 'plan', 'ACTIVE', \(autoRenew), \(expires), \(chain), \(signed))
                    """)
                try await pool.query(
                    """
                    INSERT INTO apple_renewal_info (environment, original_transaction_id, product_id, auto_renew_enabled,
                        is_in_billing_retry, grace_period_expires_at, signed_date)
                    VALUES ('Production', \(chain), 'plan', \(autoRenew), \(retry), \(grace), \(signed))
                    """)
            }
            let tasks = TaskStore(pool: pool)
            let flagged = try await tasks.requestRequeriesOfLapsedChains(
                environments: ["Production"], after: .seconds(3600), cooldown: .seconds(3600), requestedBy: "test")
            #expect(Set(flagged) == ["Production:off-silent", "Production:retry-over", "Production:grace-over"])
            let again = try await tasks.requestRequeriesOfLapsedChains(
                environments: ["Production"], after: .seconds(3600), cooldown: .seconds(3600), requestedBy: "test")
            #expect(again.isEmpty, "not again within the cooldown")
        }
    }

    // MARK: - Helpers

    /// A chain of `user` whose paid period ends `period` seconds from now, stored as the worker
    /// stores its projection, with 10 credits in SUBSCRIPTION and 10 in WELCOME and a rate of one
    /// credit a call.
    static func seed(
        _ pool: PostgresPool, user: String, original: String, period: TimeInterval, failure: Bool, autoRenew: Bool
    ) async throws -> SubscriptionState {
        try await pool.query("INSERT INTO app_user (user_id) VALUES (\(user))")
        try await pool.query(
            """
            INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount)
            VALUES ('com.example.subscriptions', 'plan', 'group', 'pro', 1, 'P1M', 10)
            """)
        try await pool.transaction { db in
            for credits in [CreditPool.subscription, .welcome] {
                try await CreditLedger(pool: pool).grant(
                    [
                        CreditGrant(
                            userID: user,
                            decision: GrantDecision(grantKey: "\(user):\(credits)", pool: credits, amount: 10 * credit, reason: "TEST"),
                            environment: "Sandbox", transactionID: original, originalTransactionID: original)
                    ], limits: CreditLimits(), on: db)
            }
        }
        try await pool.query(
            "INSERT INTO credit_rate_version (code, version, micro_credits_per_unit, effective_from) VALUES ('call', 1, \(credit), 'epoch')")
        // Last, so the period still runs when the caller spends in it.
        let now = Date()
        var facts = ChainFacts()
        facts.record(
            TransactionFact(
                environment: "Sandbox", transactionID: original, originalTransactionID: original, productID: "plan",
                purchaseDate: now - 30 * 86_400, expiresDate: now + period, transactionReason: "PURCHASE",
                signedDate: now - 30 * 86_400))
        facts.record(
            RenewalFact(
                environment: "Sandbox", originalTransactionID: original, productID: "plan", autoRenewProductID: "plan",
                autoRenewEnabled: autoRenew, isInBillingRetryPeriod: failure, signedDate: now))
        let state = try #require(SubscriptionProjection.project(facts, now: now))
        #expect(state.status == .active)
        try await pool.query(ChainBindingStore.storeProjections([.init(state: state, user: user, group: "group")]))
        return state
    }

    /// Charge `charge` of a twelve-month commitment ending at `commitmentEnd`, its subscriber having
    /// turned auto-renew off during it (and Apple's next charge failing when `failureGrace` is
    /// given), stored as the worker stores its projection.
    static func seedCommitment(
        _ pool: PostgresPool, user: String, original: String, charge: Int, purchase: Date, expires: Date, commitmentEnd: Date,
        failureGrace: Date?
    ) async throws -> SubscriptionState {
        try await pool.query("INSERT INTO app_user (user_id) VALUES (\(user))")
        var facts = ChainFacts()
        facts.record(
            TransactionFact(
                environment: "Sandbox", transactionID: original + "-\(charge)", originalTransactionID: original, productID: "plan",
                purchaseDate: purchase, expiresDate: expires, transactionReason: "RENEWAL", signedDate: purchase,
                commitment: TransactionCommitment(
                    billingPlan: .monthly, billingPeriodNumber: charge, totalBillingPeriods: 12, expiresDate: commitmentEnd,
                    price: 119_880)))
        facts.record(
            RenewalFact(
                environment: "Sandbox", originalTransactionID: original, productID: "plan", autoRenewProductID: "plan",
                autoRenewEnabled: false, isInBillingRetryPeriod: failureGrace != nil, gracePeriodExpiresDate: failureGrace,
                signedDate: purchase + 3600,
                commitment: RenewalCommitment(billingPlan: .monthly, autoRenewProductID: "plan", autoRenewEnabled: false)))
        let state = try #require(SubscriptionProjection.project(facts, now: purchase + 7200))
        try await pool.query(ChainBindingStore.storeProjections([.init(state: state, user: user, group: "group")]))
        return state
    }

    static func use(_ pool: PostgresPool, _ user: String) async throws -> PoolAmounts {
        try await CreditMeter(pool: pool).use(
            UsageRequest(service: "svc", idempotencyKey: UUID().uuidString, userID: user, units: 1, rateCode: "call", occurredAt: nil),
            now: Date()
        ).receipt().drawn
    }

    /// What the read endpoints say now.
    static func statusNow(_ pool: PostgresPool, _ user: String) async throws -> SubscriptionStatus? {
        try await SubscriptionStore(pool: pool).subscriptions(userID: user).first?.status(at: Date())
    }

    static func storedStatus(_ pool: PostgresPool, _ original: String) async throws -> String {
        try await pool.query("SELECT status FROM user_subscription WHERE original_transaction_id = \(original)")[0].decode("status")
    }

    /// Waits until the wall clock (and the database's) passed `moment`.
    static func waitPast(_ moment: Date) async throws {
        let wait = moment.timeIntervalSinceNow + 0.2
        if wait > 0 { try await Task.sleep(for: .milliseconds(Int(wait * 1000))) }
    }
}
