import Credits
import Domain
import Foundation
import Postgres
import ServiceRuntime
import TestSupport
import Testing

/// The time-driven jobs, each called with a chosen "now".
@Suite(.timeLimit(.minutes(3)))
struct CreditJobsTests {
    static let credit = Credits.micro

    @Test func dailyCloseRoundsTheDayUpSettlesFromTheBalanceAndRecordsTheShortfall() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("alice", .subscription, micro: 10 * Self.credit)
            try await f.fund("bob", .welcome, micro: 1_100_000)
            try await f.rate("call", micro: 300_000)
            let day = Date.utc("2026-03-01T10:00:00Z")
            // Alice: 3 × 0.3 + 0.3 = 1.2 credits that day; Bob: 1.2 of his 1.1 cannot, 0.9 can.
            _ = try await f.use("alice", units: 3, now: day)
            _ = try await f.use("alice", units: 1, now: day + 3600)
            _ = try await f.use("bob", units: 3, now: day)

            let jobs = f.jobs()
            #expect(try await jobs.closeDays(now: .utc("2026-03-01T23:59:59Z")) == 0, "the day is not over")
            #expect(try await jobs.closeDays(now: .utc("2026-03-02T00:00:00Z")) == 2)
            #expect(try await jobs.closeDays(now: .utc("2026-03-02T00:00:01Z")) == 0, "closed once")
            let bills = try await f.pool.query(
                "SELECT user_id, total_cost, charged, rounding, settled, shortfall FROM credit_daily_bill ORDER BY user_id")
            let rows = try bills.map { row in
                try ["total_cost", "charged", "rounding", "settled", "shortfall"].map { try row.decode($0, as: Int64.self) }
            }
            #expect(rows == [[1_200_000, 2_000_000, 800_000, 800_000, 0], [900_000, 1_000_000, 100_000, 100_000, 0]])
            #expect(try await f.total("alice") == 8 * Self.credit)
            #expect(try await f.total("bob") == 100_000)

            #expect(try await f.violations() == 0)
        }
    }

    @Test func missedDaysAreCaughtUpAndAShortfallIsRecordedNeverANegativeBalance() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("bob", .permanent, micro: 1_500_000)
            try await f.rate("call", micro: 100_000)
            // Two days of usage, nobody closed them; 0.1 + 0.1 spent, 1.3 left.
            _ = try await f.use("bob", units: 1, now: .utc("2026-03-01T10:00:00Z"))
            _ = try await f.use("bob", units: 1, now: .utc("2026-03-02T10:00:00Z"))
            #expect(try await f.jobs().closeDays(now: .utc("2026-03-05T00:00:10Z")) == 2)
            // Day 1 settles 0.9 (0.4 left); day 2 needs 0.9, gets 0.4, shortfall 0.5.
            let settled = try await f.pool.query("SELECT settled, shortfall FROM credit_daily_bill ORDER BY day").map {
                [try $0.decode("settled", as: Int64.self), try $0.decode("shortfall", as: Int64.self)]
            }
            #expect(settled == [[900_000, 0], [400_000, 500_000]])
            #expect(try await f.total("bob") == 0)
            #expect(try await f.violations() == 0)
        }
    }

    @Test func usageAfterItsDayWasClosedCountsTowardTheNextDay() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("alice", .subscription, micro: 10 * Self.credit)
            try await f.rate("call", micro: 500_000)
            _ = try await f.use("alice", units: 1, now: .utc("2026-03-01T10:00:00Z"))
            // A worker whose clock is ahead closed the day while this ingress still thinks it is that day.
            try await f.jobs().closeDays(now: .utc("2026-03-02T00:00:00Z"))
            let late = try await f.use("alice", units: 1, now: .utc("2026-03-01T23:59:59Z")).receipt()
            #expect(late.billDay == "2026-03-02")
            #expect(try await f.count("SELECT count(*) FROM credit_daily_bill WHERE day = '2026-03-02' AND total_cost = 500000") == 1)
        }
    }

    /// An ingress still in the day a worker is closing: usage calls and closes of that day run at
    /// once, both locking accounts before bills, so neither waits for the other in a cycle (a
    /// deadlock would fail a call or a batch) and every cost lands in exactly one bill, counted
    /// before that bill was closed or in the next day's.
    @Test func usageRacingTheCloseOfItsDayIsCountedOnceWithoutDeadlock() async throws {
        try await CreditsFixture.with { f in
            let users = (0..<40).map { "racer-\($0)" }
            for user in users {
                try await f.fund(user, .subscription, micro: 50 * Self.credit)
                try await f.fund(user, .permanent, micro: 50 * Self.credit)
            }
            try await f.rate("call", micro: 300_001)
            let jobs = f.jobs(batchSize: 1)
            let late = Date.utc("2026-03-01T23:59:59Z")
            try await withThrowingTaskGroup(of: Void.self) { group in
                for round in 0..<200 {
                    group.addTask { _ = try await f.use(users[round % users.count], units: Int64(1 + round % 4), now: late) }
                }
                group.addTask {
                    for _ in 0..<50 { try await jobs.closeDays(now: .utc("2026-03-02T00:00:00Z")) }
                }
                try await group.waitForAll()
            }
            try await jobs.closeDays(now: .utc("2026-03-03T00:00:00Z"))
            #expect(try await f.count("SELECT count(*) FROM credit_usage_event") == 200)
            // Each bill holds exactly the costs of the events that name its day, and was closed on its total.
            #expect(
                try await f.count(
                    """
                    SELECT count(*) FROM credit_daily_bill b
                     FULL JOIN (SELECT user_id, bill_day AS day, sum(cost) AS cost FROM credit_usage_event GROUP BY 1, 2) e
                            USING (user_id, day)
                     WHERE b.total_cost IS DISTINCT FROM e.cost OR b.closed_at IS NULL OR b.charged <> b.total_cost + b.rounding
                    """) == 0)
            #expect(try await f.violations() == 0)
        }
    }

    /// The close waits for the accounts a usage call holds before it touches that user's bills: a
    /// call that holds them (here kept open in a transaction) still counts into the day being
    /// closed, and the close then closes the bill on that total (a close taking the bill first would
    /// deadlock with the call).
    @Test func theCloseWaitsForTheAccountsOfAUsageCallBeforeTakingItsBill() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("alice", .subscription, micro: 10 * Self.credit)
            try await f.rate("call", micro: 300_000)
            let late = Date.utc("2026-03-01T23:59:59Z")
            _ = try await f.use("alice", units: 1, now: late)
            let jobs = f.jobs()
            let close = try await f.pool.withConnection { db in
                try await db.transaction { tx in
                    try await tx.query("SELECT balance FROM credit_account WHERE user_id = 'alice' ORDER BY pool FOR UPDATE")
                    let close = Task { try await jobs.closeDays(now: .utc("2026-03-02T00:00:00Z")) }
                    while try await f.count(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'") == 0
                    {
                        try await Task.sleep(for: .milliseconds(5))
                    }
                    let receipt = try await CreditMeter(pool: f.pool).use(
                        UsageRequest(service: "svc", idempotencyKey: "held", userID: "alice", units: 2, rateCode: "call", occurredAt: nil),
                        now: late, on: tx
                    ).receipt()
                    #expect(receipt.billDay == "2026-03-01")
                    return close
                }
            }
            #expect(try await close.value == 1)
            #expect(try await f.count("SELECT count(*) FROM credit_daily_bill WHERE total_cost = 900000 AND charged = 1000000") == 1)
            #expect(try await f.violations() == 0)
        }
    }

    @Test func endedChainsLoseTheirOwnLotsAtTheNextUTCMidnightOnce() async throws {
        try await CreditsFixture.with { f in
            let expired = Date.utc("2026-03-10T15:00:00Z")
            for (user, chain) in [("alice", "a1"), ("bob", "b1"), ("carol", "c1"), ("carol", "c2"), ("dave", "d1"), ("erin", "e1")] {
                try await f.fund(user, .subscription, micro: 100 * Self.credit, chain: chain)
            }
            try await f.fund("alice", .permanent, micro: 5 * Self.credit)
            // An operator's credit to the pool belongs to no chain: no ending takes it.
            try await f.fund("alice", .subscription, micro: 2 * Self.credit)
            try await f.subscription(
                user: "alice", original: "a1", product: "p", status: "EXPIRED", purchase: expired - 30 * 86_400, expires: expired)
            // Bob's refund came on the 9th for a period ending on the 10th: cleared at the midnight
            // after the revocation, not after the refunded period's expiry.
            try await f.subscription(
                user: "bob", original: "b1", product: "p", status: "REVOKED", purchase: expired - 30 * 86_400, expires: expired + 5 * 86_400,
                revoked: .utc("2026-03-09T10:00:00Z"))
            // Carol's old chain expired and she subscribed again: the old chain's lots go, the new
            // chain's stay, and the new chain does not hold back the old one's clearing.
            try await f.subscription(
                user: "carol", original: "c1", product: "p", status: "EXPIRED", purchase: expired - 30 * 86_400, expires: expired)
            try await f.subscription(user: "carol", original: "c2", product: "p", status: "ACTIVE", purchase: expired, expires: expired + 30 * 86_400)
            // Dave is in grace: service continues, nothing happens.
            try await f.subscription(user: "dave", original: "d1", product: "p", status: "GRACE", purchase: expired - 30 * 86_400, expires: expired)
            // The chains were known to have ended when they expired.
            try await f.pool.query(
                """
                INSERT INTO status_history (entity_type, entity_key, current_status, cause, created_at)
                SELECT 'SUBSCRIPTION', environment || ':' || original_transaction_id, status, 'test', \(expired) FROM user_subscription
                """)

            let jobs = f.jobs()
            #expect(try await jobs.clearExpiredPools(now: .utc("2026-03-09T23:59:59Z")) == 0)
            #expect(try await jobs.clearExpiredPools(now: .utc("2026-03-10T00:00:00Z")) == 1, "the revocation's midnight")
            #expect(try await f.balances("bob")[.subscription] == 0)
            // The backlog gauge: due at midnight, overdue an hour later while nothing ran.
            #expect(try await jobs.overdue(now: .utc("2026-03-11T00:59:59Z"), grace: .seconds(3600)).expiryClearings == 0)
            #expect(try await jobs.overdue(now: .utc("2026-03-11T01:00:01Z"), grace: .seconds(3600)).expiryClearings == 2)
            #expect(try await jobs.clearExpiredPools(now: .utc("2026-03-10T23:59:59Z")) == 0)
            #expect(try await jobs.clearExpiredPools(now: .utc("2026-03-11T00:00:00Z")) == 2)
            #expect(try await jobs.overdue(now: .utc("2026-03-11T01:00:01Z"), grace: .seconds(3600)).expiryClearings == 0)
            #expect(
                try await f.balances("alice") == [.subscription: 2 * Self.credit, .permanent: 5 * Self.credit],
                "permanent credits and an operator's never expire")
            #expect(try await f.total("carol") == 100 * Self.credit, "the new chain's lots")
            #expect(try await f.total("dave") == 100 * Self.credit)
            #expect(try await f.total("erin") == 100 * Self.credit, "a lot whose chain has no subscription row")
            #expect(
                try await f.count(
                    "SELECT count(*) FROM outbound_event WHERE type = 'credits.cleared' AND data->>'amount' = '100' AND data->>'pool' = 'SUBSCRIPTION'"
                ) == 3)
            // A grant after the clearing stays: the ending was handled once.
            try await f.fund("alice", .subscription, micro: 7 * Self.credit, chain: "a1")
            #expect(try await jobs.clearExpiredPools(now: .utc("2026-03-12T00:00:00Z")) == 0)
            #expect(try await f.balances("alice")[.subscription] == 9 * Self.credit)
            #expect(try await f.count("SELECT count(*) FROM credit_expiry_clearing") == 3)
            #expect(try await f.count("SELECT count(*) FROM credit_expiry_clearing WHERE cleared_amount = 0") == 0)
            #expect(try await f.violations() == 0)
        }
    }

    @Test func aChainRemembersItsHandledEndingAndIsSearchedAgainWhenItEndsAgain() async throws {
        try await CreditsFixture.with { f in
            let expired = Date.utc("2026-03-10T15:00:00Z")
            for (user, chain) in [("alice", "a1"), ("bob", "b1")] {
                try await f.fund(user, .subscription, micro: 100 * Self.credit, chain: chain)
            }
            for (user, original) in [("alice", "a1"), ("bob", "b1")] {
                try await f.subscription(
                    user: user, original: original, product: "p", status: "EXPIRED", purchase: expired - 30 * 86_400,
                    expires: expired, known: expired)
            }
            let jobs = f.jobs()
            let unmarked = """
                SELECT count(*) FROM user_subscription
                 WHERE status IN ('EXPIRED', 'REVOKED') AND cleared_ending IS DISTINCT FROM last_transaction_id || ':' || status
                """
            #expect(try await f.count(unmarked) == 2)
            #expect(try await jobs.clearExpiredPools(now: .utc("2026-03-11T00:00:00Z")) == 2)
            #expect(try await f.count(unmarked) == 0, "handled endings leave the search")
            // A lost mark only sends the search to the clearing rows: nothing is cleared twice.
            try await f.pool.query("UPDATE user_subscription SET cleared_ending = NULL WHERE user_id = 'bob'")
            try await f.fund("bob", .subscription, micro: 3 * Self.credit, chain: "b1")
            #expect(try await jobs.clearExpiredPools(now: .utc("2026-03-12T00:00:00Z")) == 0)
            #expect(try await f.total("bob") == 3 * Self.credit)
            // Alice renews and her chain ends again: a new ending, searched and cleared once.
            let renewed = expired + 30 * 86_400
            try await f.fund("alice", .subscription, micro: 9 * Self.credit, chain: "a1")
            try await f.subscription(
                user: "alice", original: "a1", transaction: "a2", product: "p", status: "EXPIRED", purchase: expired,
                expires: renewed, known: renewed)
            #expect(try await f.count(unmarked) == 2)
            #expect(try await jobs.clearExpiredPools(now: .utc("2026-04-10T00:00:00Z")) == 1)
            #expect(try await f.total("alice") == 0)
            #expect(try await f.count("SELECT count(*) FROM credit_expiry_clearing") == 3)
            #expect(try await f.violations() == 0)
        }
    }

    @Test func yearlyPlansGetEachMonthOnTheAnchorDayClampedToTheMonthEndOnce() async throws {
        try await CreditsFixture.with { f in
            try await f.product("yearly", duration: "P1Y", credits: 3000)
            let purchase = Date.utc("2027-01-31T09:30:00Z")
            try await f.subscription(
                user: "alice", original: "y1", product: "yearly", status: "ACTIVE", purchase: purchase, expires: purchase + 365 * 86_400)
            // Month 0 was granted by fulfillment.
            try await f.fund("alice", .subscription, micro: 3000 * Self.credit, key: "period:Sandbox:y1:m0")
            try await f.pool.query("UPDATE credit_grant SET environment = 'Sandbox', transaction_id = 'y1' WHERE grant_key = 'period:Sandbox:y1:m0'")
            let jobs = f.jobs()
            #expect(try await jobs.grantPlanMonths(now: .utc("2027-02-28T09:29:59Z")) == 0, "not yet the anchor time")
            #expect(try await jobs.grantPlanMonths(now: .utc("2027-02-28T09:30:00Z")) == 1, "31 January → 28 February")
            #expect(try await jobs.grantPlanMonths(now: .utc("2027-02-28T12:00:00Z")) == 0, "each month once")
            #expect(try await jobs.grantPlanMonths(now: .utc("2027-03-31T09:30:00Z")) == 1, "back to the 31st")
            // A missed scheduler: the backlog gauge counts the months due over an hour ago; the job
            // catches up every due month, and never grants after the period.
            #expect(try await jobs.overdue(now: .utc("2027-05-31T10:29:00Z"), grace: .seconds(3600)).planMonths == 1)
            #expect(try await jobs.overdue(now: .utc("2028-06-01T00:00:00Z"), grace: .seconds(3600)).planMonths == 9)
            #expect(try await jobs.grantPlanMonths(now: .utc("2028-06-01T00:00:00Z")) == 9)
            #expect(try await jobs.overdue(now: .utc("2028-06-01T00:00:00Z"), grace: .seconds(3600)).planMonths == 0)
            let keys = try await f.pool.query("SELECT grant_key FROM credit_grant").map { try $0.decode(0, as: String.self) }
            #expect(keys.count == 12 && Set(keys) == Set((0..<12).map { "period:Sandbox:y1:m\($0)" }))
            #expect(try await f.total("alice") == 12 * 3000 * Self.credit)
            #expect(try await f.violations() == 0)
        }
    }

    @Test func yearlyMonthsStopWhenTheTransactionIsRevokedOrWasNeverGranted() async throws {
        try await CreditsFixture.with { f in
            try await f.product("yearly", duration: "P1Y", credits: 3000)
            let purchase = Date.utc("2027-01-15T00:00:00Z")
            try await f.subscription(
                user: "alice", original: "y1", product: "yearly", status: "REVOKED", purchase: purchase, expires: purchase + 365 * 86_400,
                revoked: purchase + 86_400)
            try await f.fund("alice", .subscription, micro: 3000 * Self.credit, key: "period:Sandbox:y1:m0")
            try await f.pool.query("UPDATE credit_grant SET environment = 'Sandbox', transaction_id = 'y1'")
            // A free trial whose product grants nothing on trials: no month 0, so no months at all.
            try await f.subscription(
                user: "bob", original: "y2", product: "yearly", status: "ACTIVE", purchase: purchase, expires: purchase + 365 * 86_400)
            #expect(try await f.jobs().grantPlanMonths(now: .utc("2027-12-31T00:00:00Z")) == 0)
        }
    }

    @Test func welcomeCreditsOncePerUser() async throws {
        try await CreditsFixture.with { f in
            for user in ["a", "b", "c"] { try await f.user(user) }
            let jobs = f.jobs(welcome: 50, batchSize: 2)
            #expect(try await jobs.grantWelcomeCredits() == 3)
            #expect(try await jobs.grantWelcomeCredits() == 0)
            try await f.user("d")
            #expect(try await jobs.runAll(now: Date()).welcomeGrants == 1)
            #expect(try await f.balances("d") == [.welcome: 50 * Self.credit])
            #expect(try await f.jobs().grantWelcomeCredits() == 0, "not configured: nothing")
            #expect(try await jobs.checkInvariant() == 0)
        }
    }

    @Test func theInvariantCheckSeesABalanceThatDiffersFromItsLedger() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("alice", .subscription, micro: 5 * Self.credit)
            let jobs = f.jobs()
            #expect(try await jobs.checkInvariant() == 0)
            try await f.pool.query("UPDATE credit_account SET balance = balance + 1")
            #expect(try await jobs.checkInvariant() == 1)
        }
    }

    @Test func workersShareOneInvariantCheckPerInterval() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("alice", .subscription, micro: 5 * Self.credit)
            let first = f.jobs()
            let second = f.jobs()
            #expect(try await first.checkInvariantIfDue(interval: .seconds(600)) == 0)
            try await f.pool.query("UPDATE credit_account SET balance = balance + 1")
            // Within the interval the other worker reports what the check found, without reading
            // the books again; once it has passed, one of them checks again.
            #expect(try await second.checkInvariantIfDue(interval: .seconds(600)) == 0)
            try await f.pool.query("UPDATE credit_invariant_check SET checked_at = now() - interval '601 seconds'")
            #expect(try await second.checkInvariantIfDue(interval: .seconds(600)) == 1)
            #expect(try await first.checkInvariantIfDue(interval: .seconds(600)) == 1)
            // An operator's check runs at once and is what the workers report next.
            try await f.pool.query("UPDATE credit_account SET balance = balance - 1")
            #expect(try await first.checkInvariant() == 0)
            #expect(try await second.checkInvariantIfDue(interval: .seconds(600)) == 0)
            // A row deleted by hand is claimed again, not a check that never runs.
            try await f.pool.query("DELETE FROM credit_invariant_check")
            try await f.pool.query("UPDATE credit_account SET balance = balance + 1")
            #expect(try await second.checkInvariantIfDue(interval: .seconds(600)) == 1)
        }
    }
}

/// The UTC day arithmetic the bills and the close rely on.
@Suite struct UTCDayTests {
    @Test func dayTextMatchesTheCalendarFrom1900To2400() {
        for index in stride(from: Int64(-25_567), through: 157_000, by: 13) {
            let day = UTCDay(index: index)
            #expect(day.text == String(RFC3339.string(from: day.start).prefix(10)), "day \(index)")
        }
        #expect(UTCDay(containing: .utc("2028-02-29T23:59:59Z")).text == "2028-02-29")
        #expect(UTCDay(containing: .utc("2028-02-29T23:59:59Z")).next.start == .utc("2028-03-01T00:00:00Z"))
    }
}

@Suite struct CreditBalanceDocumentTests {
    @Test(arguments: [
        [CreditPool.subscription: Int64(1_000_500_000), .welcome: 750_000, .permanent: 20_000_000],
        [:], [.permanent: 1],
    ])
    func directDocumentIsWhatJSONEncoderWrites(_ pools: [CreditPool: MicroCredits]) throws {
        let balance = CreditBalance(pools)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        #expect(String(decoding: balance.json, as: UTF8.self) == String(decoding: try encoder.encode(balance), as: UTF8.self))
    }
}
