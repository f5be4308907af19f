import Domain
import Foundation
import Testing

/// Monthly plans with a 12-month commitment: grants per billed month, renewal and expiry per the
/// commitment, refunds per charge.
@Suite struct CommitmentRulesTests {
    let start = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01T00:00:00Z
    let month: TimeInterval = 31 * 86_400
    var commitmentEnd: Date { start.addingTimeInterval(365 * 86_400) }

    let yearly = CatalogueProduct(
        productID: "pro.yearly.monthly", subscriptionGroupID: "g", planCode: "pro", planLevel: 1, duration: .year,
        creditsAmount: 3000, billingPlan: .monthly)
    let upfront = CatalogueProduct(
        productID: "pro.yearly", subscriptionGroupID: "g", planCode: "pro", planLevel: 1, duration: .year, creditsAmount: 3000)

    /// The `number`th monthly charge of a twelve-month commitment that started at `start`.
    func charge(_ number: Int, id: String? = nil, total: Int = 12) -> TransactionFact {
        let purchase = start.addingTimeInterval(Double(number - 1) * month)
        return TransactionFact(
            environment: "Production", transactionID: id ?? "200000000000000\(number)", originalTransactionID: "2000000000000001",
            productID: yearly.productID, purchaseDate: purchase, expiresDate: min(purchase.addingTimeInterval(month), commitmentEnd),
            transactionReason: number == 1 ? "PURCHASE" : "RENEWAL", signedDate: purchase,
            commitment: TransactionCommitment(
                billingPlan: .monthly, billingPeriodNumber: number, totalBillingPeriods: total, expiresDate: commitmentEnd,
                price: 119_880))
    }

    func renewal(autoRenew: Bool, commitmentAutoRenew: Bool?) -> RenewalFact {
        RenewalFact(
            environment: "Production", originalTransactionID: "2000000000000001", productID: yearly.productID,
            autoRenewProductID: yearly.productID, autoRenewEnabled: autoRenew, signedDate: start,
            commitment: commitmentAutoRenew.map { RenewalCommitment(billingPlan: .monthly, autoRenewEnabled: $0) })
    }

    @Test func eachMonthlyChargeGrantsThatMonthOnceAsAMonthlyPlanDoes() {
        let first = CreditRules.grants(for: charge(1), product: yearly)
        let second = CreditRules.grants(for: charge(2), product: yearly)
        #expect(
            first == [
                GrantDecision(grantKey: "period:Production:2000000000000001", pool: .subscription, amount: Credits.micro(3000), reason: "PURCHASE")
            ])
        #expect(
            second == [
                GrantDecision(grantKey: "period:Production:2000000000000002", pool: .subscription, amount: Credits.micro(3000), reason: "RENEWAL")
            ])
        // Keyed as a whole period, never as month 0 of a year: the monthly-grant job (which
        // continues only from a `:m0` grant) never schedules the rest of the year on one charge.
        #expect(!CreditRules.firstGrantKey(charge(1), product: yearly).hasSuffix(":m0"))
        #expect(
            CreditRules.periodMonths(offerDiscountType: nil, offerPeriod: nil, duration: .year, billingPlan: .monthly) == 1)
        // The same product billed up front still grants month by month over its year.
        var billedUpfront = charge(1)
        billedUpfront.commitment = nil
        #expect(CreditRules.firstGrantKey(billedUpfront, product: upfront).hasSuffix(":m0"))
        #expect(CreditRules.periodMonths(offerDiscountType: nil, offerPeriod: nil, duration: .year) == 12)
    }

    @Test func aCancellationInsideTheCommitmentKeepsThePlanToTheCommitmentsEnd() {
        let now = start.addingTimeInterval(month + 86_400)
        let latest = charge(2)
        let cancelled = renewal(autoRenew: false, commitmentAutoRenew: false)
        #expect(CommitmentRules.standing(of: latest, now: now) == .committed(ends: commitmentEnd))
        #expect(CommitmentRules.renews(latest: latest, renewal: cancelled, now: now), "the remaining charges are still due")
        #expect(CommitmentRules.plannedEnd(latest: latest, renewal: cancelled, now: now) == commitmentEnd)
        #expect(CommitmentRules.plannedEnd(latest: latest, renewal: cancelled, now: now) != latest.expiresDate)
        // Apple may keep the plan's switch on and turn the commitment's off: the same outcome.
        let commitmentOff = renewal(autoRenew: true, commitmentAutoRenew: false)
        #expect(CommitmentRules.plannedEnd(latest: latest, renewal: commitmentOff, now: now) == commitmentEnd)
        // Not cancelled: nothing ends.
        let renewing = renewal(autoRenew: true, commitmentAutoRenew: true)
        #expect(CommitmentRules.plannedEnd(latest: latest, renewal: renewing, now: now) == nil)
    }

    @Test func afterTheCommitmentAPlanExpiresAsAnyOther() {
        let last = charge(12)
        let now = last.purchaseDate.addingTimeInterval(86_400)
        #expect(CommitmentRules.standing(of: last, now: now) == .finalPeriod(ends: commitmentEnd))
        let cancelled = renewal(autoRenew: false, commitmentAutoRenew: false)
        #expect(!CommitmentRules.renews(latest: last, renewal: cancelled, now: now))
        #expect(CommitmentRules.plannedEnd(latest: last, renewal: cancelled, now: now) == last.expiresDate)
        #expect(CommitmentRules.renews(latest: last, renewal: renewal(autoRenew: true, commitmentAutoRenew: true), now: now))
        // Past the commitment's end even a charge whose counters look early is ruled normally.
        let late = charge(3)
        #expect(CommitmentRules.standing(of: late, now: commitmentEnd.addingTimeInterval(1)) == .finalPeriod(ends: commitmentEnd))
        #expect(!CommitmentRules.renews(latest: late, renewal: cancelled, now: commitmentEnd.addingTimeInterval(1)))
    }

    @Test func aPlanBilledUpFrontIsNotCommitted() {
        var upfrontCharge = charge(1)
        upfrontCharge.commitment = TransactionCommitment(billingPlan: .billedUpfront)
        let cancelled = renewal(autoRenew: false, commitmentAutoRenew: nil)
        #expect(CommitmentRules.standing(of: upfrontCharge, now: start) == .notCommitted)
        #expect(!CommitmentRules.renews(latest: upfrontCharge, renewal: cancelled, now: start))
        #expect(CommitmentRules.plannedEnd(latest: upfrontCharge, renewal: cancelled, now: start) == upfrontCharge.expiresDate)
        #expect(CommitmentRules.plannedEnd(latest: upfrontCharge, renewal: nil, now: start) == nil)
    }

    @Test func aRefundRevokesTheRefundedChargeOnly() {
        var refunded = charge(2)
        refunded.revocationDate = refunded.purchaseDate.addingTimeInterval(86_400)
        #expect(CreditRules.grants(for: refunded, product: yearly).isEmpty, "a refunded month grants nothing")
        // The refund takes back what remains of that month's lot (its share when prorated); the
        // first month's lot has its own key and is untouched.
        let firstKey = CreditRules.firstGrantKey(charge(1), product: yearly)
        let refundedKey = CreditRules.firstGrantKey(refunded, product: yearly)
        #expect(firstKey != refundedKey)
        var lot = GrantRecord(grantKey: refundedKey, userID: "u", pool: .subscription, amount: Credits.micro(3000), remaining: Credits.micro(3000))
        #expect(CreditRules.revoke(&lot, percentage: 50_000) == Credits.micro(1500))
    }

    @Test func theCatalogueStatesThePlanType() {
        #expect(CommitmentRules.matchesCatalogue(charge(1), product: yearly))
        #expect(!CommitmentRules.matchesCatalogue(charge(1), product: upfront))
        var billedUpfront = charge(1)
        billedUpfront.commitment = nil
        #expect(CommitmentRules.matchesCatalogue(billedUpfront, product: upfront))
        #expect(CommitmentRules.isMonthlyCharge(charge(1)) && !CommitmentRules.isMonthlyCharge(billedUpfront))
    }
}
