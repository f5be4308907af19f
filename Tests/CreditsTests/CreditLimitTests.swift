import Credits
import Domain
import Foundation
import Postgres
import TestSupport
import Testing

/// The ledger's statements at the ends of the range on a real PostgreSQL: a pool never passes
/// `CREDITS_MAX_BALANCE`, an adjustment never passes `CREDITS_MAX_ADJUSTMENT`, a job's grant past
/// the maximum is recorded refused while the others book, and the daily close sets aside the one
/// bill it cannot settle. Balances written before the bounds (up to 2⁶³−1) are read without trapping.
@Suite(.timeLimit(.minutes(3)))
struct CreditLimitTests {
    static let credit = Credits.micro
    /// 20 credits per pool, 15 per adjustment.
    static let limits = CreditLimits(maxBalanceCredits: 20, maxAdjustmentCredits: 15)

    func adjust(_ f: CreditsFixture, _ amount: MicroCredits, _ number: String, limits: CreditLimits = Self.limits) async throws
        -> CreditAdjustment
    {
        try await f.pool.transaction {
            try await CreditLedger(pool: f.pool).adjust(
                userID: "alice", pool: .permanent, amount: amount, adjustmentNo: number, operator: "ops", reason: "test", limits: limits,
                on: $0)
        }
    }

    func refusal(_ body: () async throws -> CreditAdjustment) async throws -> String? {
        do {
            _ = try await body()
            return nil
        } catch CreditAdjustmentError.amountOutOfRange(let problem) {
            return problem
        }
    }

    @Test func adjustmentsStopAtTheLimitsAndBookNothingWhenRefused() async throws {
        try await CreditsFixture.with { f in
            try await f.user("alice")
            // The finding: 9223372036854.775807 credits was accepted, and the next +1 killed the ingress.
            #expect(try await refusal { try await adjust(f, .max, "A-0", limits: CreditLimits()) } != nil)
            #expect(try await refusal { try await adjust(f, .min + 1, "A-0", limits: CreditLimits()) } != nil)
            #expect(try await refusal { try await adjust(f, 15 * Self.credit + 1, "A-1") } != nil, "past the adjustment maximum")
            #expect(try await adjust(f, 15 * Self.credit, "A-1").balanceAfter == 15 * Self.credit)
            #expect(try await refusal { try await adjust(f, 5 * Self.credit + 1, "A-2") } != nil, "past the balance maximum")
            #expect(try await adjust(f, 5 * Self.credit - 1, "A-2").balanceAfter == 20 * Self.credit - 1, "max − 1")
            #expect(try await adjust(f, 1, "A-3").balanceAfter == 20 * Self.credit, "max")
            #expect(try await refusal { try await adjust(f, 1, "A-4") } != nil, "max + 1")
            #expect(try await refusal { try await adjust(f, 0, "A-4") } != nil, "zero changes nothing")
            #expect(try await adjust(f, -15 * Self.credit, "A-4").balanceAfter == 5 * Self.credit)
            #expect(try await f.count("SELECT count(*) FROM credit_adjustment") == 4)
            #expect(try await f.count("SELECT count(*) FROM audit_log WHERE action = 'CREDITS_ADJUSTED'") == 4)
            #expect(try await f.violations() == 0)
        }
    }

    @Test func aGrantPastTheMaximumBooksNothingAndNamesItsPool() async throws {
        try await CreditsFixture.with { f in
            try await f.user("alice")
            try await f.user("bob")
            func grant(_ user: String, _ key: String, _ amount: MicroCredits, _ pool: CreditPool = .subscription) -> CreditGrant {
                CreditGrant(userID: user, decision: GrantDecision(grantKey: key, pool: pool, amount: amount, reason: "TEST"))
            }
            // Exactly the maximum, in one statement of several grants.
            #expect(
                try await f.pool.transaction {
                    try await CreditLedger(pool: f.pool).grant(
                        [grant("alice", "a1", 12 * Self.credit), grant("alice", "a2", 8 * Self.credit)], limits: Self.limits, on: $0)
                } == 2)
            // One micro-credit more, beside a grant that fits: the transaction must roll back both.
            await #expect(throws: CreditLimitExceeded(pools: [UserPool(user: "alice", pool: .subscription)])) {
                try await f.pool.transaction {
                    try await CreditLedger(pool: f.pool).grant(
                        [grant("alice", "a3", 1), grant("bob", "b1", Self.credit)], limits: Self.limits, on: $0)
                }
            }
            // A new account whose first grants alone pass the maximum (their sum is numeric in SQL).
            await #expect(throws: CreditLimitExceeded.self) {
                try await f.pool.transaction {
                    try await CreditLedger(pool: f.pool).grant(
                        [grant("bob", "b2", .max, .permanent), grant("bob", "b3", .max, .permanent)], limits: Self.limits, on: $0)
                }
            }
            #expect(try await f.balances("alice") == [.subscription: 20 * Self.credit])
            #expect(try await f.balances("bob") == [:])
            #expect(try await f.count("SELECT count(*) FROM credit_grant") == 2)

            // A job books what fits and records the rest, once.
            let (booked, refused) = try await f.pool.transaction {
                try await CreditLedger(pool: f.pool).grantRefusingOverLimit(
                    [grant("alice", "a3", 1), grant("bob", "b1", Self.credit)], limits: Self.limits, on: $0)
            }
            #expect(booked == 1 && refused.map(\.decision.grantKey) == ["a3"])
            #expect(try await f.balances("bob") == [.subscription: Self.credit])
            #expect(
                try await f.count(
                    "SELECT count(*) FROM credit_grant_refusal WHERE grant_key = 'a3' AND error_code = 'AMOUNT_OUT_OF_RANGE' AND amount = 1")
                    == 1)
            #expect(try await f.violations() == 0)
        }
    }

    @Test func sumsOfManyMaximaBookAndBalance() async throws {
        try await CreditsFixture.with { f in
            let widest = CreditLimits(maxBalanceCredits: CreditLimits.ceiling, maxAdjustmentCredits: CreditLimits.ceiling)
            var grants: [CreditGrant] = []
            for index in 0..<50 {
                try await f.user("u\(index)")
                for pool in CreditPool.allCases {
                    grants.append(
                        CreditGrant(
                            userID: "u\(index)",
                            decision: GrantDecision(grantKey: "max-\(index)-\(pool.rawValue)", pool: pool, amount: widest.maxBalance, reason: "TEST"))
                    )
                }
            }
            #expect(try await f.pool.transaction { try await CreditLedger(pool: f.pool).grant(grants, limits: widest, on: $0) } == 150)
            #expect(try await f.balances("u7") == [.subscription: widest.maxBalance, .welcome: widest.maxBalance, .permanent: widest.maxBalance])
            #expect(try await f.violations() == 0, "the check sums 150 maxima as numeric")
            // Every pool full: one more micro-credit to any of them is refused.
            await #expect(throws: CreditLimitExceeded.self) {
                try await f.pool.transaction {
                    try await CreditLedger(pool: f.pool).grant(
                        [CreditGrant(userID: "u0", decision: GrantDecision(grantKey: "one-more", pool: .welcome, amount: 1, reason: "TEST"))],
                        limits: widest, on: $0)
                }
            }
            // Full pools can still spend and be refunded.
            try await f.rate("call", micro: 1)
            #expect(try await f.use("u0", units: 1).receipt().balance.microCredits == 3 * widest.maxBalance - 1)
            let taken = try await f.pool.transaction {
                try await CreditLedger(pool: f.pool).revoke(grantKey: "max-1-PERMANENT", percentage: nil, on: $0)
            }
            #expect(taken == widest.maxBalance)
            #expect(try await f.violations() == 0)
        }
    }

    @Test func aBalanceFromBeforeTheBoundsIsReadAndSpentWithoutTrapping() async throws {
        try await CreditsFixture.with { f in
            // What the finding left behind: 2⁶³−1 micro-credits in one pool, more in another.
            try await f.fund("alice", .subscription, micro: Self.credit)
            try await f.fund("alice", .permanent, micro: Self.credit, key: "legacy")
            try await f.pool.query("UPDATE credit_account SET balance = 9223372036854775807 WHERE user_id = 'alice' AND pool = 'PERMANENT'")
            try await f.pool.query("UPDATE credit_grant SET amount = 9223372036854775807, remaining = 9223372036854775807 WHERE grant_key = 'legacy'")
            try await f.rate("call", micro: 300_000)

            let check = try await f.pool.withConnection {
                try await CreditMeter(pool: f.pool).check(userID: "alice", units: 1, rateCode: "call", now: Date(), on: $0)
            }
            #expect(check.affordable)
            #expect(check.balance.microCredits == .max, "the total is shown saturated")
            let used = try await f.use("alice", units: 1, now: .utc("2026-03-01T10:00:00Z")).receipt()
            #expect(used.drawn.subscription == "0.3")
            // The daily close of that user (the sum of its pools trapped every worker) and another's.
            try await f.fund("bob", .welcome, micro: 5 * Self.credit)
            _ = try await f.use("bob", units: 1, now: .utc("2026-03-01T11:00:00Z"))
            #expect(try await f.jobs().closeDays(now: .utc("2026-03-02T00:00:00Z")) == 2)
            #expect(try await f.total("bob") == 4 * Self.credit)
            #expect(try await f.balances("alice")[.subscription] == 0)
            // An adjustment on it is refused with a reason instead of killing the ingress.
            await #expect(throws: CreditAdjustmentError.self) {
                try await f.pool.transaction {
                    try await CreditLedger(pool: f.pool).adjust(
                        userID: "alice", pool: .permanent, amount: 1, adjustmentNo: "A-1", operator: "ops", reason: "test",
                        limits: CreditLimits(), on: $0)
                }
            }
        }
    }

    @Test func theDailyCloseSetsAsideTheBillItCannotSettleAndClosesTheRest() async throws {
        try await CreditsFixture.with { f in
            try await f.rate("call", micro: 300_000)
            for user in ["ann", "bad", "cid"] {
                try await f.fund(user, .permanent, micro: 10 * Self.credit)
                _ = try await f.use(user, units: 1, now: .utc("2026-03-01T10:00:00Z"))
            }
            // A total whose rounding up passes 2⁶³−1: only a hand-edited row can hold it.
            try await f.pool.query("UPDATE credit_daily_bill SET total_cost = 9223372036854775807 WHERE user_id = 'bad'")
            let jobs = f.jobs(batchSize: 10)
            #expect(try await jobs.closeDays(now: .utc("2026-03-02T00:00:00Z")) == 2)
            #expect(try await f.total("ann") == 9 * Self.credit)
            #expect(try await f.total("cid") == 9 * Self.credit)
            let bad = try #require(
                try await f.pool.query("SELECT closed_at, close_failure, close_failed_at FROM credit_daily_bill WHERE user_id = 'bad'").first)
            #expect(try bad.decode("closed_at", as: Date?.self) == nil)
            #expect(try bad.decode("close_failure", as: String?.self)?.contains("64-bit") == true)
            #expect(try await f.total("bad") == 10 * Self.credit - 300_000, "nothing taken from the set-aside bill's user")
            // Not tried again the same day, tried again the next.
            #expect(try await jobs.closeDays(now: .utc("2026-03-02T06:00:00Z")) == 0)
            try await f.pool.query("UPDATE credit_daily_bill SET total_cost = 300000 WHERE user_id = 'bad'")
            #expect(try await jobs.closeDays(now: .utc("2026-03-02T12:00:00Z")) == 0, "still set aside today")
            #expect(try await jobs.closeDays(now: .utc("2026-03-03T00:00:00Z")) == 1)
            #expect(try await f.count("SELECT count(*) FROM credit_daily_bill WHERE close_failure IS NOT NULL OR closed_at IS NULL") == 0)
            #expect(try await f.violations() == 0)
        }
    }

    @Test func jobGrantsPastTheMaximumAreRecordedOnceAndTheOthersBook() async throws {
        try await CreditsFixture.with { f in
            let limits = CreditLimits(maxBalanceCredits: 10, maxAdjustmentCredits: 10)
            try await f.fund("full", .welcome, micro: 8 * Self.credit)
            try await f.user("new")
            let jobs = f.jobs(welcome: 5, limits: limits)
            #expect(try await jobs.grantWelcomeCredits() == 2, "one booked, one refused: both done")
            #expect(try await f.balances("new") == [.welcome: 5 * Self.credit])
            #expect(try await f.balances("full") == [.welcome: 8 * Self.credit])
            #expect(try await f.count("SELECT count(*) FROM credit_grant_refusal WHERE grant_key = 'welcome:full'") == 1)
            #expect(try await jobs.grantWelcomeCredits() == 0, "a refused grant is not tried again")
            #expect(try await f.violations() == 0)
        }
    }
}
