import Domain
import Foundation
import Testing

/// A cancellation inside a 12-month commitment, by the clock: a month's end with auto-renew off is
/// not the plan's end (Apple takes the remaining charges whatever auto-renew says), in every arrival
/// order of the facts and for a row the clock advances; the plan ends with the commitment.
@Suite struct CommitmentClockTests {
    let plan = CommitmentRulesTests()
    let clock = SubscriptionClockTests()
    let day: TimeInterval = 86_400

    /// The renewal info Apple signs at `signed`: auto-renew as the subscriber set it, with Apple's
    /// failure facts when a charge failed.
    func renewal(signed: Date, autoRenew: Bool, retry: Bool = false, grace: Date? = nil) -> RenewalFact {
        RenewalFact(
            environment: "Production", originalTransactionID: "2000000000000001", productID: plan.yearly.productID,
            autoRenewProductID: plan.yearly.productID, autoRenewEnabled: autoRenew, isInBillingRetryPeriod: retry,
            gracePeriodExpiresDate: grace, signedDate: signed,
            commitment: RenewalCommitment(billingPlan: .monthly, autoRenewEnabled: autoRenew))
    }

    func project(_ transactions: [TransactionFact], _ renewals: [RenewalFact], now: Date) -> SubscriptionState? {
        clock.projections.project(transactions, renewals, now: now)
    }

    @Test func turnedOffInMonthThreeTheNextChargeKeepsThePlanActive() throws {
        let third = plan.charge(3)
        let fourth = plan.charge(4)
        let off = renewal(signed: third.purchaseDate + 5 * day, autoRenew: false)
        let monthThreeEnd = try #require(third.expiresDate)
        let instants = [monthThreeEnd - day, monthThreeEnd, monthThreeEnd + 10 * day, try #require(fourth.expiresDate) - 1]
        #expect(
            clock.statuses([plan.charge(2), third, fourth], [off], at: instants) == [.active, .active, .active, .active],
            "Apple's fourth charge, in any order with the cancellation")
        let state = try #require(project([third], [off], now: monthThreeEnd - day))
        #expect(state.commitmentEndsAt == plan.commitmentEnd)
        #expect(!state.autoRenewEnabled, "the subscriber's switch is shown as it is")
        #expect(state.willRenew, "the commitment continues: another charge is due")
        #expect(state.nextChangeAt == monthThreeEnd, "as with auto-renew on: the month's end awaits the next charge")
    }

    @Test func insideTheCommitmentAFailedChargeGivesGraceAndBillingRetryAsWithAutoRenewOn() throws {
        let third = plan.charge(3)
        let monthThreeEnd = try #require(third.expiresDate)
        let graceEnd = monthThreeEnd + 16 * day
        let off = renewal(signed: third.purchaseDate + 5 * day, autoRenew: false)
        // Apple tries the fourth charge a day early and fails; auto-renew is still off.
        let failed = renewal(signed: monthThreeEnd - day, autoRenew: false, retry: true, grace: graceEnd)
        let instants = [monthThreeEnd - 1, monthThreeEnd, graceEnd - 1, graceEnd, monthThreeEnd + 60 * day]
        #expect(clock.statuses([third], [failed], at: instants) == [.active, .grace, .grace, .billingRetry, .expired])
        #expect(clock.statuses([third], [off, failed], at: instants) == [.active, .grace, .grace, .billingRetry, .expired])
        let inGrace = try #require(project([third], [failed], now: monthThreeEnd + day))
        #expect(inGrace.status == .grace && inGrace.status.hasService && inGrace.willRenew)
        // A plan billed up front with the same facts ends at the period's end: the commitment is the reason.
        var upfront = third
        upfront.commitment = nil
        #expect(clock.statuses([upfront], [failed], at: [monthThreeEnd]) == [.expired])
    }

    @Test func withAutoRenewOffThePlanEndsWithTheCommitment() throws {
        let eleventh = plan.charge(11)
        let last = plan.charge(12)
        let off = renewal(signed: plan.charge(3).purchaseDate + 5 * day, autoRenew: false)
        let end = plan.commitmentEnd
        #expect(last.expiresDate == end)
        #expect(clock.statuses([eleventh, last], [off], at: [end - day, end - 1, end, end + 30 * day]) == [.active, .active, .expired, .expired])
        let final = try #require(project([eleventh, last], [off], now: end - day))
        #expect(final.commitmentEndsAt == nil, "the last charge: no charge of the commitment follows")
        #expect(!final.willRenew)
        #expect(final.nextChangeAt == end)
        #expect(final.advanced(to: end).nextChangeAt == nil, "nothing more by the clock")
        // Even a failure fact in the last month is not retried: nothing is due after the commitment.
        let failed = renewal(signed: end - day, autoRenew: false, retry: true, grace: end + 16 * day)
        #expect(clock.statuses([last], [failed], at: [end, end + day]) == [.expired, .expired])
    }

    @Test func afterTheCommitmentOrdinaryRulesApply() throws {
        let last = plan.charge(12)
        // Auto-renew on: a new period follows the commitment as for any plan; a failure is retried.
        let end = plan.commitmentEnd
        let failed = renewal(signed: end - day, autoRenew: true, retry: true, grace: end + 16 * day)
        #expect(clock.statuses([last], [failed], at: [end - 1, end, end + 16 * day]) == [.active, .grace, .billingRetry])
        #expect(try #require(project([last], [failed], now: end - day)).willRenew)
        // A charge whose counters look early but whose period reaches the commitment's end is its last.
        var reaching = plan.charge(5)
        reaching.expiresDate = end
        #expect(CommitmentRules.remainingChargesEnd(after: reaching) == nil)
        #expect(CommitmentRules.remainingChargesEnd(after: plan.charge(5)) == end)
    }

    @Test func aRefundedChargeEndsThePlanAsAnyRevocation() throws {
        var refunded = plan.charge(3)
        refunded.revocationDate = refunded.purchaseDate + day
        refunded.signedDate = refunded.purchaseDate + day
        let off = renewal(signed: refunded.purchaseDate + 2 * day, autoRenew: false)
        let state = try #require(project([plan.charge(2), refunded], [off], now: refunded.purchaseDate + 3 * day))
        #expect(state.status == .revoked && state.commitmentEndsAt == nil && !state.willRenew && state.nextChangeAt == nil)
    }

    /// What the app reads: the entitlement stays active through the month's end and says it renews.
    @Test func theEntitlementStaysActiveAndRenewsInsideTheCommitment() throws {
        let third = plan.charge(3)
        let monthThreeEnd = try #require(third.expiresDate)
        let failed = renewal(signed: monthThreeEnd - day, autoRenew: false, retry: true, grace: monthThreeEnd + 16 * day)
        let state = try #require(project([third], [failed], now: monthThreeEnd + day))
        let chain = EntitlementChain(
            environment: state.environment, originalTransactionID: state.originalTransactionID, productID: state.activeProductID,
            status: state.status, autoRenewEnabled: state.autoRenewEnabled, expiresAt: state.expiresAt,
            graceExpiresAt: state.graceExpiresAt, commitmentEndsAt: state.commitmentEndsAt)
        let items = Entitlements.items(chains: [chain], grants: [], entitlementsOf: { _ in ["pro"] }, now: monthThreeEnd + day)
        #expect(items.count == 1 && items[0].active && items[0].willRenew && items[0].status == .grace)
        // The same chain without its commitment: auto-renew off ends it at the month's end.
        var plain = chain
        plain.commitmentEndsAt = nil
        plain.status = .expired
        #expect(!Entitlements.items(chains: [plain], grants: [], entitlementsOf: { _ in ["pro"] }, now: monthThreeEnd + day)[0].willRenew)
    }
}
