import Credits
import Domain
import Foundation
import Postgres
import ServiceRuntime
import Storage
import TestSupport
import Testing

@testable import FulfillmentApp

/// Credits as lots through the worker's batches on a real PostgreSQL (no processes: the events are
/// verified already, as the group commit hands them to `FulfillmentBatches.apply`): refunds take
/// from their own transaction's lots only, prorated refunds take their share, and a reversal gives
/// back what the refund and the midnight clearing it caused took.
@Suite(.timeLimit(.minutes(2)))
struct CreditLotsFulfillmentTests {
    static let credit = Credits.micro

    /// Spends `credits` of the user's balance through the metering rules (one credit per unit).
    func use(_ fixture: Fixture, _ user: String, credits: Int64) async throws {
        _ = try await CreditMeter(pool: fixture.database.pool).use(
            UsageRequest(service: "test", idempotencyKey: UUID().uuidString, userID: user, units: credits, rateCode: "unit", occurredAt: nil),
            now: Date())
    }

    func prepare(_ fixture: Fixture) async throws {
        try await fixture.database.pool.query(
            """
            INSERT INTO credit_rate_version (code, version, micro_credits_per_unit, effective_from)
            VALUES ('unit', 1, \(Self.credit), '2020-01-01T00:00:00Z')
            """)
    }

    func remaining(_ fixture: Fixture) async throws -> [String: Int64] {
        var lots: [String: Int64] = [:]
        for row in try await fixture.database.pool.query("SELECT transaction_id, remaining FROM credit_grant") {
            lots[try row.decode("transaction_id")] = try row.decode("remaining", as: Int64.self) / Self.credit
        }
        return lots
    }

    func balance(_ fixture: Fixture, _ user: String) async throws -> Int64 {
        try await fixture.database.pool.query(
            "SELECT coalesce(sum(balance), 0)::bigint AS b FROM credit_account WHERE user_id = \(user)"
        )[0].decode("b", as: Int64.self) / Self.credit
    }

    func violations(_ fixture: Fixture) async throws -> Int {
        try await fixture.database.pool.withConnection { try await CreditLedger(pool: fixture.database.pool).invariantViolations(on: $0) }
    }

    func apply(_ fixture: Fixture, _ facts: Fact...) async throws {
        for fact in facts {
            let results = try await fixture.apply(try await fixture.claim([fact]))
            try #require(results.map(\.verdict) == [.applied], "\(fact.type): \(results)")
        }
    }

    /// Three monthly grants; usage burns the oldest lots first; the refund of the middle renewal
    /// takes what remains of its own lot and leaves the newest grant whole.
    @Test func aRefundOfAnOldRenewalLeavesLaterGrantsUntouched() async throws {
        try await Fixture.with { fixture in
            try await prepare(fixture)
            let token = try await fixture.user("rhea")
            let purchase = Fact.purchase(original: "5101", transaction: "5101", token: token, daysAgo: 65)
            let renewal = Fact.renewal(original: "5101", transaction: "5102", token: token, daysAgo: 35)
            let latest = Fact.renewal(original: "5101", transaction: "5103", token: token, daysAgo: 5)
            try await apply(fixture, purchase, renewal, latest)
            try await use(fixture, "rhea", credits: 1500)
            #expect(try await remaining(fixture) == ["5101": 0, "5102": 500, "5103": 1000])

            try await apply(fixture, renewal.refund())
            #expect(try await remaining(fixture) == ["5101": 0, "5102": 0, "5103": 1000])
            #expect(try await balance(fixture, "rhea") == 1000)
            // The oldest grant, spent already: its refund takes nothing from the others.
            try await apply(fixture, purchase.refund())
            #expect(try await balance(fixture, "rhea") == 1000)
            #expect(
                try await fixture.count("SELECT count(*) FROM user_subscription WHERE status = 'ACTIVE' AND original_transaction_id = '5101'")
                    == 1)
            #expect(try await violations(fixture) == 0)
        }
    }

    /// A purchase of the same plan applied before the refund of the period it fell in was taken
    /// for a switch back (nothing granted); the refund, when it comes, grants it as a new purchase,
    /// once, in its own lot.
    @Test func aRefundArrivingAfterARepurchaseOfTheSamePlanGrantsTheRepurchase() async throws {
        try await Fixture.with { fixture in
            try await prepare(fixture)
            let token = try await fixture.user("ines")
            let purchase = Fact.purchase(original: "5301", transaction: "5301", token: token, daysAgo: 10)
            let again = Fact.purchase(original: "5301", transaction: "5302", token: token, daysAgo: 5)
            try await apply(fixture, purchase, again)
            #expect(try await remaining(fixture) == ["5301": 1000])
            try await apply(fixture, purchase.refund())
            #expect(try await remaining(fixture) == ["5301": 0, "5302": 1000])
            try await apply(fixture, purchase.refund())
            #expect(try await balance(fixture, "ines") == 1000)
            #expect(try await violations(fixture) == 0)
        }
    }

    /// Apple's `revocationPercentage` 50000: half of what remains of the lot is taken back.
    @Test func aFiftyPercentProratedRefundTakesHalfOfWhatRemains() async throws {
        try await Fixture.with { fixture in
            try await prepare(fixture)
            let token = try await fixture.user("paz")
            let purchase = Fact.purchase(original: "5201", transaction: "5201", token: token, daysAgo: 3)
            try await apply(fixture, purchase)
            try await use(fixture, "paz", credits: 200)
            try await apply(fixture, purchase.refund(percentage: 50_000))
            #expect(try await balance(fixture, "paz") == 400)
            #expect(
                try await fixture.count("SELECT revocation_percentage FROM apple_transaction WHERE transaction_id = '5201'") == 50_000)
            #expect(
                try await fixture.count("SELECT (revoked_amount / 1000000)::int FROM credit_grant WHERE transaction_id = '5201'") == 400)
            // Delivered again: nothing more.
            try await apply(fixture, purchase.refund(percentage: 50_000))
            #expect(try await balance(fixture, "paz") == 400)
            #expect(try await violations(fixture) == 0)
        }
    }

    /// A consumption answer reports how much of the transaction's own lot usage burned, whatever
    /// the other lots hold.
    @Test func theConsumptionAnswerReportsWhatTheTransactionsLotUsed() async throws {
        try await Fixture.with { fixture in
            try await prepare(fixture)
            let token = try await fixture.user("cody")
            let purchase = Fact.purchase(original: "5401", transaction: "5401", token: token, daysAgo: 35)
            let renewal = Fact.renewal(original: "5401", transaction: "5402", token: token, daysAgo: 5)
            try await apply(fixture, purchase, renewal)
            try await use(fixture, "cody", credits: 1250)
            let store = ConsumptionStore(pool: fixture.database.pool)
            for (transaction, used) in [("5401", 1000), ("5402", 250)] {
                let facts = try await store.facts(
                    notificationUUID: UUID().uuidString, environment: "Sandbox", transactionID: transaction, originalTransactionID: "5401",
                    productID: FulfillmentBatchTests.product, appAccountToken: token)
                #expect(facts.used == Int64(used) * Self.credit, "\(transaction)")
                #expect(ConsumptionReport.consumptionPercentage(used: facts.used ?? 0, granted: facts.granted) == Int32(used * 100))
            }
        }
    }

    /// A credit pack (CONSUMABLE) bought twice through `ONE_TIME_CHARGE`: a PERMANENT lot per
    /// purchase, once each, no subscription row; refunding one takes what remains of its own lot.
    @Test func aCreditPackBoughtTwiceAndRefundedOnce() async throws {
        try await Fixture.with { fixture in
            try await prepare(fixture)
            let packID = "com.example.batch.pack500"
            try await fixture.database.pool.query(
                """
                INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount,
                                             kind, permanent_credits)
                VALUES (\(FulfillmentBatchTests.appKey), \(packID), '', 'pack500', 1, 'P1M', 0, 'CONSUMABLE', 500)
                """)
            let token = try await fixture.user("pia")
            func pack(_ id: String, daysAgo: Double) -> Fact {
                var fact = Fact.fact("ONE_TIME_CHARGE", nil, original: id, transaction: id, token: token, daysAgo: daysAgo, product: packID)
                fact.transaction.fact.expiresDate = nil
                fact.transaction.fact.transactionReason = "PURCHASE"
                return fact
            }
            let first = pack("5501", daysAgo: 2)
            let second = pack("5502", daysAgo: 1)
            try await apply(fixture, first, second, first)
            #expect(try await remaining(fixture) == ["5501": 500, "5502": 500])
            #expect(try await fixture.count("SELECT count(*) FROM credit_grant WHERE pool = 'PERMANENT' AND reason = 'CONSUMABLE'") == 2)
            #expect(try await fixture.count("SELECT count(*) FROM user_subscription") == 0, "a credit pack is no subscription")
            #expect(try await fixture.count("SELECT count(*) FROM payment_order WHERE status = 'FULFILLED'") == 2)
            try await use(fixture, "pia", credits: 600)
            try await apply(fixture, first.refund())
            #expect(try await remaining(fixture) == ["5501": 0, "5502": 400])
            #expect(try await balance(fixture, "pia") == 400)
            try await apply(fixture, second.refund(percentage: 50_000))
            #expect(try await balance(fixture, "pia") == 200)
            #expect(try await violations(fixture) == 0)
        }
    }

    /// The refund of the latest renewal revokes the chain; the next UTC midnight clears what the
    /// other lots held; the reversal makes the chain entitled again and gives back both.
    @Test func refundThenMidnightClearingThenReversalRestoresBoth() async throws {
        try await Fixture.with { fixture in
            try await prepare(fixture)
            let token = try await fixture.user("remy")
            // The renewal's period ends in half a day: a revoked chain's pool is cleared at the first
            // UTC midnight after the later of its expiry and its ending.
            let purchase = Fact.purchase(original: "5301", transaction: "5301", token: token, daysAgo: 59.5)
            let renewal = Fact.renewal(original: "5301", transaction: "5302", token: token, daysAgo: 29.5)
            try await apply(fixture, purchase, renewal)
            try await use(fixture, "remy", credits: 300)
            #expect(try await remaining(fixture) == ["5301": 700, "5302": 1000])

            try await apply(fixture, renewal.refund(signed: Date() - 120))
            #expect(try await balance(fixture, "remy") == 700)
            let jobs = CreditJobs(
                pool: fixture.database.pool, appKey: FulfillmentBatchTests.appKey, configuration: CreditsConfiguration(),
                logger: Logger(label: "test", level: .warning))
            #expect(try await jobs.clearExpiredPools(now: Date() + 2 * 86_400) == 1)
            #expect(try await balance(fixture, "remy") == 0)
            #expect(try await violations(fixture) == 0)

            try await apply(fixture, renewal.reversal(signed: Date() - 60))
            #expect(try await fixture.count("SELECT count(*) FROM user_subscription WHERE status = 'ACTIVE'") == 1)
            #expect(try await remaining(fixture) == ["5301": 700, "5302": 1000])
            #expect(try await balance(fixture, "remy") == 1700)
            // Delivered again: nothing more.
            try await apply(fixture, renewal.reversal(signed: Date() - 60))
            #expect(try await balance(fixture, "remy") == 1700)
            #expect(try await violations(fixture) == 0)
        }
    }
}
