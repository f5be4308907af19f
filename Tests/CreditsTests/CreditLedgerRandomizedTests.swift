import Credits
import Domain
import Foundation
import Postgres
import TestSupport
import Testing

/// Thousands of mixed operations (grants, usages with retried keys, refunds and reversals,
/// expiries, daily closes, yearly months) in a seeded random order; after every step no balance
/// is negative and every balance equals the sum of its ledger and the sum of its lots.
@Suite(.timeLimit(.minutes(5)))
struct CreditLedgerRandomizedTests {
    /// SplitMix64: a reproducible sequence (the seed is in the failure message).
    struct SeededGenerator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    @Test func mixedOperationsKeepEveryBalanceNonNegativeAndEqualToItsLedger() async throws {
        let seed = UInt64.random(in: 1...UInt64.max)
        var random = SeededGenerator(state: seed)
        try await CreditsFixture.with { f in
            let users = (0..<6).map { "user-\($0)" }
            for user in users { try await f.user(user) }
            try await f.rate("call", micro: 70_001)
            try await f.rate("big", micro: 3_000_000)
            let jobs = f.jobs(welcome: 2, batchSize: 3)
            var now = Date.utc("2026-01-01T08:00:00Z")
            var grantKeys: [String] = []
            var usageKeys: [String] = []
            var counts: [String: Int] = [:]

            for step in 0..<2500 {
                let user = users.randomElement(using: &random)!
                let operation = Int.random(in: 0..<100, using: &random)
                switch operation {
                case 0..<18:
                    let key = grantKeys.isEmpty || Bool.random(using: &random) ? "g\(step)" : grantKeys.randomElement(using: &random)!
                    let pool = CreditPool.allCases.randomElement(using: &random)!
                    // A SUBSCRIPTION lot comes with one of the user's two chains, whose ending clears it.
                    let chain = Int.random(in: 0..<2, using: &random)
                    try await f.fund(
                        user, pool, micro: Int64.random(in: 1...5_000_000, using: &random), key: key,
                        chain: pool == .subscription ? "\(user)-chain-\(chain)" : nil)
                    grantKeys.append(key)
                    counts["grant", default: 0] += 1
                case 18..<55:
                    let key = usageKeys.isEmpty || Int.random(in: 0..<5, using: &random) > 0 ? "u\(step)" : usageKeys.randomElement(using: &random)!
                    do {
                        _ = try await f.use(
                            user, units: Int64.random(in: 1...20, using: &random), rate: Bool.random(using: &random) ? "call" : "big",
                            key: key, now: now)
                        usageKeys.append(key)
                        counts["usage", default: 0] += 1
                    } catch let error as UsageError {
                        counts["refused", default: 0] += 1
                        if case .creditsExhausted = error {} else if error != .idempotencyConflict { throw error }
                    }
                case 55..<65:
                    guard let key = grantKeys.randomElement(using: &random) else { continue }
                    let percentage = [nil, 50_000, Int.random(in: 0...100_000, using: &random)].randomElement(using: &random)!
                    try await f.pool.transaction { try await CreditLedger(pool: f.pool).revoke(grantKey: key, percentage: percentage, on: $0) }
                    counts["refund", default: 0] += 1
                case 65..<72:
                    guard let key = grantKeys.randomElement(using: &random) else { continue }
                    try await f.pool.transaction { try await CreditLedger(pool: f.pool).restore(grantKey: key, on: $0) }
                    counts["reversal", default: 0] += 1
                case 72..<78:
                    // Each user has two chains whose status moves (a new transaction each time).
                    let status = ["EXPIRED", "REVOKED", "ACTIVE", "GRACE"].randomElement(using: &random)!
                    try await f.subscription(
                        user: user, original: "\(user)-chain-\(Int.random(in: 0..<2, using: &random))", transaction: "t\(step)",
                        product: "p", status: status, purchase: now - 86_400 * 30, expires: now, revoked: status == "REVOKED" ? now : nil,
                        known: now)
                    counts["expiry", default: 0] += 1
                case 78..<88:
                    now += TimeInterval.random(in: 3600...30 * 3600, using: &random)
                default:
                    let report = try await jobs.runAll(now: now)
                    counts["closed", default: 0] += report.billsClosed
                    counts["cleared", default: 0] += report.poolsCleared
                }
                let negative = try await f.count("SELECT count(*) FROM credit_account WHERE balance < 0")
                let violations = try await f.violations()
                try #require(negative == 0 && violations == 0, "step \(step), seed \(seed): \(negative) negative, \(violations) unbalanced")
            }
            try await jobs.runAll(now: now + 2 * 86_400)
            #expect(try await f.count("SELECT count(*) FROM credit_daily_bill WHERE closed_at IS NULL") == 0)
            #expect(try await f.violations() == 0)
            // Every closed bill settled or recorded all of its rounding.
            #expect(
                try await f.count("SELECT count(*) FROM credit_daily_bill WHERE charged <> total_cost + rounding OR rounding <> settled + shortfall")
                    == 0
            )
            #expect(counts["usage", default: 0] > 100 && counts["closed", default: 0] > 10 && counts["cleared", default: 0] > 0, "\(counts)")
        }
    }
}
