import Domain
import Foundation
import Testing

/// Facts of one chain generated from a seed, so failures are reproducible.
struct ChainGenerator {
    var state: UInt64
    mutating func next(_ bound: Int) -> Int {
        state = state &* 6364136223846793005 &+ 1442695040888963407
        return Int((state >> 33) % UInt64(bound))
    }

    mutating func facts(start: Date) -> (transactions: [TransactionFact], renewals: [RenewalFact]) {
        let products = ["com.example.starter.monthly", "com.example.pro.monthly", "com.example.pro.yearly"]
        var transactions: [TransactionFact] = []
        var periodStart = start
        // Some chains are monthly charges of a commitment that outlasts them (a cancellation inside it keeps the plan).
        let committed = next(3) == 0
        for i in 0..<(1 + next(5)) {
            let product = products[next(products.count)]
            let expires = periodStart.addingTimeInterval(30 * 86_400)
            var tx = TransactionFact(
                environment: "Sandbox", transactionID: "\(1000 + i)", originalTransactionID: "1000",
                productID: product, purchaseDate: periodStart, expiresDate: expires,
                transactionReason: i == 0 ? "PURCHASE" : "RENEWAL", signedDate: periodStart.addingTimeInterval(1))
            if next(6) == 0 { tx.isUpgraded = true }
            if committed {
                tx.commitment = TransactionCommitment(
                    billingPlan: .monthly, billingPeriodNumber: i + 1, totalBillingPeriods: 12,
                    expiresDate: start.addingTimeInterval(360 * 86_400))
            }
            transactions.append(tx)
            if next(5) == 0 {  // a refund re-signs the same transaction later
                var refunded = tx
                refunded.revocationDate = periodStart.addingTimeInterval(3600)
                refunded.signedDate = periodStart.addingTimeInterval(3600)
                transactions.append(refunded)
            }
            periodStart = expires
        }
        var renewals: [RenewalFact] = []
        for j in 0..<next(4) {
            renewals.append(
                RenewalFact(
                    environment: "Sandbox", originalTransactionID: "1000", productID: products[next(3)],
                    autoRenewProductID: products[next(3)], autoRenewEnabled: next(2) == 0,
                    isInBillingRetryPeriod: next(3) == 0,
                    gracePeriodExpiresDate: next(3) == 0 ? periodStart.addingTimeInterval(86_400 * 3) : nil,
                    signedDate: start.addingTimeInterval(Double(j * 1000 + next(500)))))
        }
        return (transactions, renewals)
    }
}

@Suite struct SubscriptionProjectionTests {
    let t0 = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01T00:00:00Z

    func project(_ transactions: [TransactionFact], _ renewals: [RenewalFact], now: Date) -> SubscriptionState? {
        var facts = ChainFacts()
        for fact in transactions { facts.record(fact) }
        for fact in renewals { facts.record(fact) }
        return SubscriptionProjection.project(facts, now: now)
    }

    @Test func everyArrivalOrderGivesTheSameRow() {
        var generator = ChainGenerator(state: 42)
        for _ in 0..<300 {
            let (transactions, renewals) = generator.facts(start: t0)
            let now = t0.addingTimeInterval(Double(generator.next(200)) * 86_400)
            let expected = project(transactions, renewals, now: now)
            let all: [Any] = transactions + renewals
            for _ in 0..<20 {
                var shuffled = all
                for i in shuffled.indices.reversed() where i > 0 { shuffled.swapAt(i, generator.next(i + 1)) }
                let got = project(
                    shuffled.compactMap { $0 as? TransactionFact }, shuffled.compactMap { $0 as? RenewalFact }, now: now)
                let interleaved: SubscriptionState? = {
                    var facts = ChainFacts()
                    for fact in shuffled {
                        if let t = fact as? TransactionFact { facts.record(t) } else { facts.record(fact as! RenewalFact) }
                    }
                    return SubscriptionProjection.project(facts, now: now)
                }()
                #expect(got == expected)
                #expect(interleaved == expected)
            }
        }
    }

    @Test func smallChainsInEveryPermutation() {
        let purchase = tx("1", purchase: t0, expires: t0 + 30 * 86_400)
        let renewal = tx("2", purchase: t0 + 30 * 86_400, expires: t0 + 60 * 86_400)
        var refunded = renewal
        refunded.revocationDate = t0 + 31 * 86_400
        refunded.signedDate = t0 + 31 * 86_400
        let facts: [TransactionFact] = [purchase, renewal, refunded]
        let now = t0 + 35 * 86_400
        let expected = project(facts, [], now: now)
        #expect(expected?.status == .revoked)
        for permutation in permutations(facts) {
            #expect(project(permutation, [], now: now) == expected)
        }
    }

    @Test func renewalProcessedBeforeAnOlderFailureStaysActive() {
        let first = tx("1", purchase: t0, expires: t0 + 30 * 86_400)
        let renewed = tx("2", purchase: t0 + 31 * 86_400, expires: t0 + 61 * 86_400)
        let failure = RenewalFact(
            environment: "Sandbox", originalTransactionID: "1", productID: first.productID,
            autoRenewProductID: first.productID, autoRenewEnabled: true, isInBillingRetryPeriod: true,
            signedDate: t0 + 30 * 86_400)
        let state = project([renewed, first], [failure], now: t0 + 32 * 86_400)
        #expect(state?.status == .active)
        #expect(state?.lastTransactionID == "2")
    }

    @Test func statusFollowsTheClockAndRenewalInfo() {
        let purchase = tx("1", purchase: t0, expires: t0 + 30 * 86_400)
        #expect(project([purchase], [], now: t0 + 86_400)?.status == .active)
        #expect(project([purchase], [], now: t0 + 31 * 86_400)?.status == .expired)
        let grace = renewal(signed: t0 + 30 * 86_400, grace: t0 + 36 * 86_400, retry: true)
        #expect(project([purchase], [grace], now: t0 + 31 * 86_400)?.status == .grace)
        #expect(project([purchase], [grace], now: t0 + 31 * 86_400)?.graceExpiresAt == t0 + 36 * 86_400)
        #expect(project([purchase], [grace], now: t0 + 37 * 86_400)?.status == .billingRetry)
        let off = renewal(signed: t0 + 86_400, autoRenew: false)
        let state = project([purchase], [off], now: t0 + 2 * 86_400)
        #expect(state?.status == .active)
        #expect(state?.autoRenewEnabled == false)
    }

    @Test func downgradeIsPendingAndUpgradeSwitchesAtOnce() {
        let monthly = tx("1", purchase: t0, expires: t0 + 30 * 86_400, product: "com.example.pro.monthly")
        let downgrade = RenewalFact(
            environment: "Sandbox", originalTransactionID: "1", productID: "com.example.pro.monthly",
            autoRenewProductID: "com.example.starter.monthly", autoRenewEnabled: true, signedDate: t0 + 86_400)
        let pending = project([monthly], [downgrade], now: t0 + 2 * 86_400)
        #expect(pending?.activeProductID == "com.example.pro.monthly")
        #expect(pending?.pendingProductID == "com.example.starter.monthly")

        var old = tx("1", purchase: t0, expires: t0 + 30 * 86_400, product: "com.example.starter.monthly")
        old.isUpgraded = true
        let upgraded = tx("2", purchase: t0 + 5 * 86_400, expires: t0 + 370 * 86_400, product: "com.example.pro.yearly")
        let state = project([upgraded, old], [], now: t0 + 6 * 86_400)
        #expect(state?.activeProductID == "com.example.pro.yearly")
        #expect(state?.status == .active)
    }

    @Test func refundReversalRestoresTheEntitlement() {
        let purchase = tx("1", purchase: t0, expires: t0 + 30 * 86_400)
        var refunded = purchase
        refunded.revocationDate = t0 + 86_400
        refunded.signedDate = t0 + 86_400
        var reversed = purchase
        reversed.signedDate = t0 + 2 * 86_400
        #expect(project([purchase, refunded], [], now: t0 + 3 * 86_400)?.status == .revoked)
        #expect(project([reversed, refunded, purchase], [], now: t0 + 3 * 86_400)?.status == .active)
    }

    func tx(_ id: String, purchase: Date, expires: Date, product: String = "com.example.starter.monthly") -> TransactionFact {
        TransactionFact(
            environment: "Sandbox", transactionID: id, originalTransactionID: "1", productID: product,
            purchaseDate: purchase, expiresDate: expires, signedDate: purchase)
    }

    func renewal(signed: Date, grace: Date? = nil, retry: Bool = false, autoRenew: Bool = true) -> RenewalFact {
        RenewalFact(
            environment: "Sandbox", originalTransactionID: "1", productID: "com.example.starter.monthly",
            autoRenewProductID: "com.example.starter.monthly", autoRenewEnabled: autoRenew,
            isInBillingRetryPeriod: retry, gracePeriodExpiresDate: grace, signedDate: signed)
    }

    func permutations<T>(_ items: [T]) -> [[T]] {
        guard items.count > 1 else { return [items] }
        return items.indices.flatMap { i -> [[T]] in
            var rest = items
            let head = rest.remove(at: i)
            return permutations(rest).map { [head] + $0 }
        }
    }
}
