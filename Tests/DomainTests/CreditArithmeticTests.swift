import Domain
import Foundation
import Testing

/// The credit rules at the ends of the 64-bit range: 0, 1, the maximum and one below it, and sums
/// of many maxima. Before the bounds, a balance of 2⁶³−1 micro-credits in one pool trapped `draw`
/// (the ingress died on a balance check) and the daily close's sum of pools (every worker died).
@Suite struct CreditArithmeticTests {
    static let extremes: [MicroCredits] = [0, 1, 2, Credits.micro - 1, Credits.micro, .max - 1, .max]

    @Test func drawNeverTrapsAndTakesExactlyTheCostOrNothing() {
        for subscription in Self.extremes {
            for welcome in Self.extremes {
                for permanent in Self.extremes {
                    let balances: [CreditPool: MicroCredits] = [.subscription: subscription, .welcome: welcome, .permanent: permanent]
                    for cost in Self.extremes {
                        for spendable in [true, false] {
                            let drawn = CreditRules.draw(cost, from: balances, subscriptionSpendable: spendable)
                            // What the pools hold in all, exactly (Int64 sums of three values can pass 2⁶³).
                            let held = [spendable ? subscription : 0, welcome, permanent].map { Decimal($0) }.reduce(0, +)
                            guard let drawn else {
                                #expect(Decimal(cost) > held, "refused only when the pools cannot cover \(cost)")
                                continue
                            }
                            #expect(drawn.values.map { Decimal($0) }.reduce(0, +) == Decimal(cost))
                            for (pool, amount) in drawn {
                                #expect(amount > 0 && amount <= balances[pool]!)
                                if pool == .subscription { #expect(spendable) }
                            }
                        }
                    }
                }
            }
        }
    }

    @Test func drawIsRightOnRandomBalances() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            let balances = Dictionary(
                uniqueKeysWithValues: CreditPool.allCases.map { ($0, MicroCredits.random(in: 0 ... .max, using: &generator)) })
            let cost = MicroCredits.random(in: 0 ... .max, using: &generator)
            let held = balances.values.map { Decimal($0) }.reduce(0, +)
            let drawn = CreditRules.draw(cost, from: balances)
            #expect((drawn != nil) == (Decimal(cost) <= held))
            if let drawn { #expect(drawn.values.map { Decimal($0) }.reduce(0, +) == Decimal(cost)) }
        }
    }

    @Test func totalSaturatesInsteadOfTrapping() {
        #expect(Credits.total([]) == 0)
        #expect(Credits.total([1, 2, 3]) == 6)
        #expect(Credits.total([.max, 1]) == .max)
        #expect(Credits.total(Array(repeating: MicroCredits.max, count: 1_000)) == .max, "a sum of many maxima")
        #expect(Credits.total([.max - 1, 1]) == .max)
        #expect(Credits.total([.min, -1]) == .min)
    }

    @Test func wholeCreditsSaturate() {
        #expect(Credits.micro(0) == 0)
        #expect(Credits.micro(1) == 1_000_000)
        #expect(Credits.micro(9_223_372_036_854) == 9_223_372_036_854_000_000)
        #expect(Credits.micro(9_223_372_036_855) == .max)
        #expect(Credits.micro(.max) == .max)
        #expect(Credits.micro(-.max) == .min)
    }

    @Test func dailyChargeAtTheEnds() {
        #expect(CreditRules.dailyCharge(total: 0)! == (0, 0))
        #expect(CreditRules.dailyCharge(total: 1)! == (Credits.micro, Credits.micro - 1))
        let lastWhole = MicroCredits.max / Credits.micro * Credits.micro
        #expect(CreditRules.dailyCharge(total: lastWhole)! == (lastWhole, 0))
        #expect(CreditRules.dailyCharge(total: lastWhole + 1) == nil, "its rounding would pass 2⁶³−1")
        #expect(CreditRules.dailyCharge(total: .max - 1) == nil)
        #expect(CreditRules.dailyCharge(total: .max) == nil)
        #expect(CreditRules.dailyCharge(total: -1) == nil)
        for total in [MicroCredits(999_999), 1_000_001, 123_456_789_012] {
            let (charged, rounding) = CreditRules.dailyCharge(total: total)!
            #expect(charged % Credits.micro == 0 && charged - total == rounding && (0..<Credits.micro).contains(rounding))
        }
    }

    @Test func limitsBoundEveryPoolSoThreePoolsStillAddUp() {
        let widest = CreditLimits(maxBalanceCredits: .max, maxAdjustmentCredits: .max)
        #expect(widest.maxBalance == Credits.micro(CreditLimits.ceiling), "settings are clamped to the ceiling")
        #expect(Credits.total(Array(repeating: widest.maxBalance, count: 3)) < .max, "three full pools fit in 64 bits")
        #expect(!Credits.total(Array(repeating: widest.maxBalance, count: 3)).addingReportingOverflow(widest.maxBalance).overflow)

        let limits = CreditLimits(maxBalanceCredits: 100, maxAdjustmentCredits: 10)
        let max = limits.maxBalance
        #expect(limits.allows(0, onto: max))
        #expect(limits.allows(1, onto: max - 1))
        #expect(!limits.allows(1, onto: max))
        #expect(!limits.allows(.max, onto: 1), "an overflowing sum is refused, not trapped")
        #expect(!limits.allows(1, onto: .max))
        #expect(limits.allows(-5, onto: .max), "taking away is always allowed")

        #expect(limits.adjustmentProblem(Credits.micro(10), onto: 0) == nil)
        #expect(limits.adjustmentProblem(-Credits.micro(10), onto: 0) == nil)
        #expect(limits.adjustmentProblem(Credits.micro(10) + 1, onto: 0) != nil)
        #expect(limits.adjustmentProblem(-Credits.micro(10) - 1, onto: 0) != nil)
        #expect(limits.adjustmentProblem(.min, onto: 0) != nil)
        #expect(limits.adjustmentProblem(.max, onto: 0) != nil)
        #expect(limits.adjustmentProblem(1, onto: max) != nil)
        #expect(limits.adjustmentProblem(1, onto: max - 1) == nil)
        // The finding: 9223372036854.775807 credits.
        #expect(CreditLimits().adjustmentProblem(.max, onto: 0) != nil)
    }

    @Test func refundsOfExtremeLotsStayInRange() {
        for amount in Self.extremes where amount > 0 {
            for remaining in Self.extremes where remaining <= amount {
                for percentage in [0, 1, 50_000, 99_999, 100_000, nil] as [Int?] {
                    var lot = GrantRecord(grantKey: "k", userID: "u", pool: .permanent, amount: amount, remaining: remaining)
                    let taken = CreditRules.revoke(&lot, percentage: percentage)
                    #expect(taken >= 0 && taken <= remaining && lot.remaining == remaining - taken)
                    #expect(lot.unrecoverableAmount >= 0 && lot.unrecoverableAmount <= amount)
                    #expect(CreditRules.restore(&lot) == taken && lot.remaining == remaining)
                }
            }
        }
    }

    @Test func monthlyGrantDatesOfAnAbsurdPurchaseDateDoNotTrap() {
        for seconds in [1e15, -1e15, 9.2e12, .greatestFiniteMagnitude] {
            let dates = CreditRules.monthlyGrantDates(purchase: Date(timeIntervalSince1970: seconds), months: 12, expires: nil)
            #expect(dates.first == Date(timeIntervalSince1970: seconds), "month 0 is the purchase itself")
            #expect(dates.count <= 12)
        }
    }
}
