import Credits
import Domain
import Foundation
import Postgres
import TestSupport
import Testing

/// Grants, revocations, restorations, adjustments and metering on a real PostgreSQL.
@Suite(.timeLimit(.minutes(3)))
struct CreditLedgerTests {
    static let credit = Credits.micro

    @Test func grantIsBookedOncePerKeyWithItsLedgerEntries() async throws {
        try await CreditsFixture.with { f in
            try await f.user("alice")
            let grants = [
                CreditGrant(userID: "alice", decision: GrantDecision(grantKey: "k1", pool: .subscription, amount: 5 * Self.credit, reason: "T")),
                CreditGrant(userID: "alice", decision: GrantDecision(grantKey: "k2", pool: .subscription, amount: 7 * Self.credit, reason: "T")),
            ]
            #expect(try await f.pool.transaction { try await CreditLedger(pool: f.pool).grant(grants, limits: CreditLimits(), on: $0) } == 2)
            #expect(try await f.pool.transaction { try await CreditLedger(pool: f.pool).grant(grants, limits: CreditLimits(), on: $0) } == 0)
            #expect(try await f.balances("alice") == [.subscription: 12 * Self.credit])
            let after = try await f.pool.query("SELECT balance_after FROM credit_ledger ORDER BY id").map { try $0.decode(0, as: Int64.self) }
            #expect(after == [5 * Self.credit, 12 * Self.credit])
            #expect(try await f.violations() == 0)
        }
    }

    /// The set-based burn (one statement for a batch of users, several burns of a pool adding up)
    /// leaves every lot as `CreditRules.burn` applied burn by burn does.
    @Test func burningABatchInOneStatementFollowsTheRule() async throws {
        try await CreditsFixture.with { f in
            let users = ["ann", "bob", "cy"]
            for user in users {
                for pool in [CreditPool.subscription, .permanent] {
                    for _ in 0..<Int.random(in: 0...4) { try await f.fund(user, pool, micro: Int64.random(in: 1...9) * Self.credit) }
                }
            }
            func lots() async throws -> [String: [GrantRecord]] {
                var lots: [String: [GrantRecord]] = [:]
                for row in try await f.pool.query("SELECT grant_key, user_id, pool, amount, remaining FROM credit_grant ORDER BY id") {
                    var lot = GrantRecord(
                        grantKey: try row.decode("grant_key"), userID: try row.decode("user_id"),
                        pool: CreditPool(rawValue: try row.decode("pool"))!, amount: try row.decode("amount"))
                    lot.remaining = try row.decode("remaining")
                    lots[lot.userID + "/" + lot.pool.rawValue, default: []].append(lot)
                }
                return lots
            }
            var expected = try await lots()
            var burns: [(user: String, pool: CreditPool, amount: MicroCredits)] = []
            for _ in 0..<12 {
                let burn = (
                    user: users.randomElement()!, pool: Bool.random() ? CreditPool.subscription : .permanent,
                    amount: Int64.random(in: 0...12) * Self.credit / 2
                )
                burns.append(burn)
                CreditRules.burn(burn.amount, from: &expected[burn.user + "/" + burn.pool.rawValue, default: []])
            }
            try await f.pool.transaction { try await CreditLedger(pool: f.pool).burnLots(burns, on: $0) }
            let burned = try await lots()
            for (key, lots) in expected where !lots.isEmpty {
                #expect(burned[key]?.map(\.remaining) == lots.map(\.remaining), "\(key) after \(burns)")
            }
        }
    }

    @Test func revocationTakesWhatRemainsOfItsLotAndRestorationGivesItBack() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("alice", .subscription, micro: 1000 * Self.credit, key: "g")
            try await f.rate("call", micro: 400 * Self.credit)
            _ = try await f.use("alice", units: 1)

            let revoked = try await f.pool.transaction { try await CreditLedger(pool: f.pool).revoke(grantKey: "g", percentage: nil, on: $0) }
            #expect(revoked == 600 * Self.credit)
            #expect(try await f.total("alice") == 0)
            #expect(try await f.count("SELECT unrecoverable_amount FROM credit_grant WHERE grant_key = 'g'") == 400 * Int(Self.credit))
            // Again: nothing left to take.
            #expect(try await f.pool.transaction { try await CreditLedger(pool: f.pool).revoke(grantKey: "g", percentage: nil, on: $0) } == 0)
            #expect(try await f.count("SELECT count(*) FROM credit_ledger WHERE entry_type = 'REVOCATION'") == 1)

            #expect(try await f.pool.transaction { try await CreditLedger(pool: f.pool).restore(grantKey: "g", on: $0) } == 600 * Self.credit)
            #expect(try await f.total("alice") == 600 * Self.credit)
            #expect(try await f.pool.transaction { try await CreditLedger(pool: f.pool).restore(grantKey: "g", on: $0) } == 0)
            #expect(try await f.violations() == 0)
        }
    }

    /// Usage burns SUBSCRIPTION, then WELCOME, then PERMANENT, and within a pool the lot granted
    /// first; a refund takes from its own lot only (prorated: its share of what remains, rounded
    /// in the user's favour), never from the lots of other grants; the lots always add up to the
    /// balances (the ledger check).
    @Test func usageBurnsLotsInOrderAndARefundTakesOnlyItsOwnLot() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("bea", .permanent, micro: 50 * Self.credit, key: "pack")
            try await f.fund("bea", .subscription, micro: 100 * Self.credit, key: "old")
            try await f.fund("bea", .welcome, micro: 10 * Self.credit, key: "welcome")
            try await f.fund("bea", .subscription, micro: 100 * Self.credit, key: "new")
            try await f.rate("call", micro: Self.credit)
            _ = try await f.use("bea", units: 150)
            #expect(try await f.remaining() == ["old": 0, "new": 50 * Self.credit, "welcome": 10 * Self.credit, "pack": 50 * Self.credit])
            _ = try await f.use("bea", units: 55)
            #expect(try await f.remaining() == ["old": 0, "new": 0, "welcome": 5 * Self.credit, "pack": 50 * Self.credit])
            // The old grant's refund takes nothing: its lot was used up; the newer lots are untouched.
            #expect(try await f.pool.transaction { try await CreditLedger(pool: f.pool).revoke(grantKey: "old", percentage: nil, on: $0) } == 0)
            #expect(try await f.remaining()["welcome"] == 5 * Self.credit)
            // A 50% refund of the pack: half of what remains, the rest stays spendable.
            try await f.fund("bea", .permanent, micro: 7 * Self.credit + 1, key: "pack2")
            #expect(
                try await f.pool.transaction { try await CreditLedger(pool: f.pool).revoke(grantKey: "pack2", percentage: 50_000, on: $0) }
                    == 3_500_000)
            #expect(try await f.remaining()["pack2"] == 3_500_001)
            #expect(try await f.violations() == 0)
            // A debit by an operator burns the lots too.
            try await f.pool.transaction {
                try await CreditLedger(pool: f.pool).adjust(
                    userID: "bea", pool: .permanent, amount: -51 * Self.credit, adjustmentNo: "D1", operator: "ops", reason: "test",
                    limits: CreditLimits(), on: $0)
            }
            #expect(try await f.remaining()["pack"] == 0)
            #expect(try await f.remaining()["pack2"] == 2_500_001)
            #expect(try await f.violations() == 0)
            try await f.pool.query("UPDATE credit_grant SET remaining = remaining - 1 WHERE grant_key = 'pack2'")
            #expect(try await f.violations() == 1, "the check covers the lots")
        }
    }

    @Test func adjustmentIsBookedOncePerNumberWithAnAuditRow() async throws {
        try await CreditsFixture.with { f in
            try await f.user("alice")
            for _ in 0..<2 {
                try await f.pool.transaction {
                    try await CreditLedger(pool: f.pool).adjust(
                        userID: "alice", pool: .permanent, amount: 3 * Self.credit, adjustmentNo: "ADJ-1", operator: "ops",
                        reason: "goodwill", limits: CreditLimits(), on: $0)
                }
            }
            #expect(try await f.balances("alice") == [.permanent: 3 * Self.credit])
            #expect(try await f.count("SELECT count(*) FROM audit_log WHERE action = 'CREDITS_ADJUSTED'") == 1)
            #expect(try await f.count("SELECT count(*) FROM credit_ledger WHERE entry_type = 'ADJUSTMENT'") == 1)
        }
    }

    /// Billing retry: with no entitled chain the SUBSCRIPTION pool is passed over (and kept), usage
    /// draws WELCOME and PERMANENT or is refused; the product's rule can allow it; an entitled
    /// chain again (recovery) makes it spendable; the check answers the same.
    @Test func billingRetryKeepsTheSubscriptionPoolUnspendable() async throws {
        try await CreditsFixture.with { f in
            try await f.product("plan", duration: "P1M", credits: 10)
            let now = Date()
            try await f.subscription(
                user: "rita", original: "9100", product: "plan", status: "BILLING_RETRY", purchase: now - 40 * 86_400, expires: now - 86_400)
            try await f.fund("rita", .subscription, micro: 10 * Self.credit)
            try await f.fund("rita", .welcome, micro: 1 * Self.credit)
            try await f.rate("call", micro: Self.credit)

            let first = try await f.use("rita", units: 1).receipt()
            #expect(first.drawn == PoolAmounts([.welcome: Self.credit]))
            await #expect(throws: UsageError.creditsExhausted(cost: Self.credit, available: 0)) { try await f.use("rita", units: 1) }
            #expect(try await f.balances("rita")[.subscription] == 10 * Self.credit, "the pool is kept")
            let refusedCheck = try await f.pool.withConnection { db in
                try await CreditMeter(pool: f.pool).check(userID: "rita", units: 1, rateCode: "call", now: now, on: db).affordable
            }
            #expect(!refusedCheck)

            try await f.pool.query("UPDATE payment_product SET billing_retry_spends_credits = true WHERE product_id = 'plan'")
            #expect(try await f.use("rita", units: 1).receipt().drawn == PoolAmounts([.subscription: Self.credit]))
            try await f.pool.query("UPDATE payment_product SET billing_retry_spends_credits = false WHERE product_id = 'plan'")
            await #expect(throws: UsageError.self) { try await f.use("rita", units: 1) }

            // Apple recovers the renewal: the chain is entitled again.
            try await f.subscription(
                user: "rita", original: "9100", transaction: "9101", product: "plan", status: "ACTIVE", purchase: now, expires: now + 86_400 * 30)
            #expect(try await f.use("rita", units: 2).receipt().drawn == PoolAmounts([.subscription: 2 * Self.credit]))
            let recoveredCheck = try await f.pool.withConnection { db in
                try await CreditMeter(pool: f.pool).check(userID: "rita", units: 1, rateCode: "call", now: now, on: db).affordable
            }
            #expect(recoveredCheck)
            #expect(try await f.violations() == 0)
        }
    }

    @Test func usageDrawsSubscriptionThenWelcomeThenPermanentOrChangesNothing() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("alice", .permanent, micro: 5 * Self.credit)
            try await f.fund("alice", .welcome, micro: 2 * Self.credit)
            try await f.fund("alice", .subscription, micro: 1 * Self.credit)
            try await f.rate("call", micro: 250_000)

            // 0.25 × 10 = 2.5 credits: 1 from SUBSCRIPTION, 1.5 from WELCOME.
            let first = try await f.use("alice", units: 10).receipt()
            #expect(first.cost == "2.5")
            #expect(first.drawn == PoolAmounts([.subscription: Self.credit, .welcome: 1_500_000]))
            #expect(try await f.balances("alice") == [.subscription: 0, .welcome: 500_000, .permanent: 5 * Self.credit])
            #expect(first.balance.creditsBalance == 5 && first.balance.microCredits == 5_500_000)

            // 23 units = 5.75 credits > 5.5: refused, nothing changes (no event, no ledger, no bill growth).
            let ledgerBefore = try await f.count("SELECT count(*) FROM credit_ledger")
            await #expect(throws: UsageError.creditsExhausted(cost: 5_750_000, available: 5_500_000)) {
                try await f.use("alice", units: 23)
            }
            #expect(try await f.count("SELECT count(*) FROM credit_ledger") == ledgerBefore)
            #expect(try await f.count("SELECT count(*) FROM credit_usage_event") == 1)
            #expect(try await f.count("SELECT sum(total_cost)::int FROM credit_daily_bill") == 2_500_000)
            // Exactly the rest: 22 units = 5.5 credits.
            #expect(try await f.use("alice", units: 22).receipt().balance.microCredits == 0)
            #expect(try await f.violations() == 0)
        }
    }

    @Test func aRetriedKeyGetsTheFirstAnswerAndAnotherRequestUnderItConflicts() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("alice", .subscription, micro: 10 * Self.credit)
            try await f.rate("call", micro: Self.credit)
            let first = try await f.use("alice", units: 2, key: "k")
            #expect(!first.replayed)
            let again = try await f.use("alice", units: 2, key: "k")
            #expect(try again.replayed && again.receipt() == first.receipt() && again.json == first.json)
            let receipt = try first.receipt()
            #expect(try await f.total("alice") == 8 * Self.credit)
            await #expect(throws: UsageError.idempotencyConflict) { try await f.use("alice", units: 3, key: "k") }
            // Keys are per service.
            #expect(try await f.use("alice", units: 2, key: "k", service: "other").receipt().usageId != receipt.usageId)
            #expect(try await f.total("alice") == 6 * Self.credit)
        }
    }

    /// The answer is written by the statement itself; it must be the bytes JSONEncoder writes for
    /// the receipt (sorted keys, strings escaped), whatever the key, user and rate hold.
    @Test func theAnswerIsWhatJSONEncoderWritesForItsReceipt() async throws {
        try await CreditsFixture.with { f in
            let user = "ü \"quoted\" \\ back/slash 🚀"
            try await f.fund(user, .subscription, micro: 1_250_000)
            try await f.fund(user, .welcome, micro: 3 * Self.credit)
            try await f.fund(user, .permanent, micro: 7_000_001)
            try await f.rate("r/\"1\"", micro: 1_000_007)
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            for (units, key) in [(1, "k \"1\" é/\\"), (3, "k2"), (4, "k3")] {
                let outcome = try await f.use(user, units: Int64(units), rate: "r/\"1\"", key: key, at: .utc("2026-05-31T23:59:59.123Z"))
                let receipt = try outcome.receipt()
                #expect(outcome.json == String(decoding: try encoder.encode(receipt), as: UTF8.self))
                #expect(receipt.idempotencyKey == key && receipt.userId == user && receipt.rate == "r/\"1\"")
                #expect(receipt.occurredAt == "2026-05-31T23:59:59.123Z")
            }
            #expect(try await f.total(user) == 11_250_001 - 8 * 1_000_007)
            #expect(try await f.violations() == 0)
        }
    }

    @Test func theRateVersionInForceAtTheEventTimeGivesTheCost() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("alice", .permanent, micro: 100 * Self.credit)
            try await f.rate("img", version: 1, micro: Self.credit, from: .utc("2026-01-01T00:00:00Z"))
            try await f.rate("img", version: 2, micro: 2 * Self.credit, from: .utc("2026-06-01T00:00:00Z"))
            let now = Date.utc("2026-07-01T12:00:00Z")
            #expect(try await f.use("alice", units: 1, rate: "img", at: .utc("2026-05-31T23:59:59Z"), now: now).receipt().rateVersion == 1)
            let current = try await f.use("alice", units: 3, rate: "img", now: now).receipt()
            #expect(current.rateVersion == 2 && current.costMicroCredits == 6 * Self.credit)
            await #expect(throws: UsageError.unknownRate("img")) {
                try await f.use("alice", units: 1, rate: "img", at: .utc("2025-12-31T00:00:00Z"), now: now)
            }
            await #expect(throws: UsageError.unknownRate("none")) { try await f.use("alice", units: 1, rate: "none", now: now) }
            let check = try await f.pool.withConnection {
                try await CreditMeter(pool: f.pool).check(userID: "alice", units: 50, rateCode: "img", now: now, on: $0)
            }
            #expect(!check.affordable && check.costMicroCredits == 100 * Self.credit && check.balance.creditsBalance == 93)
            // An unknown user can afford nothing.
            await #expect(throws: UsageError.creditsExhausted(cost: 2 * Self.credit, available: 0)) {
                try await f.use("nobody", units: 1, rate: "img", now: now)
            }
        }
    }

    @Test func fiftyConcurrentCallsOnABalanceForTenCharge10() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("alice", .subscription, micro: 10 * Self.credit)
            try await f.rate("call", micro: Self.credit)
            let accepted = try await withThrowingTaskGroup(of: Bool.self) { group in
                for _ in 0..<50 {
                    group.addTask {
                        do {
                            _ = try await f.use("alice", units: 1)
                            return true
                        } catch is UsageError { return false }
                    }
                }
                return try await group.reduce(0) { $0 + ($1 ? 1 : 0) }
            }
            #expect(accepted == 10)
            #expect(try await f.total("alice") == 0)
            #expect(try await f.violations() == 0)
        }
    }
}
