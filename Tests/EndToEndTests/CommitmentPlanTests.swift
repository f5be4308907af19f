import AppStore
import AppStoreTestSupport
import Domain
import Foundation
import FulfillmentApp
import Postgres
import Storage
import TestSupport
import Testing

/// Monthly plans with a 12-month commitment through the ingress and a worker against PostgreSQL,
/// with transactions and renewal infos signed at test time carrying Apple's documented fields
/// (`billingPlanType`, `commitmentInfo`, `renewalBillingPlanType`).
@Suite(.serialized, .timeLimit(.minutes(3)))
struct CommitmentPlanTests {
    static let product = "com.example.pro.commitment"
    static let day: TimeInterval = 86_400
    static let hour: TimeInterval = 3600

    static func id() -> String { String(UInt64.random(in: 2_000_000_000_000_000...2_999_999_999_999_999)) }

    /// The `number`th monthly charge of the commitment `chain` started at `start`, signed at `signed`.
    static func charge(
        _ harness: WorkerHarness, chain: String, number: Int, start: Date, token: UUID, signed: Date
    ) -> JWSTransactionDecodedPayload {
        let purchase = start + Double(number - 1) * 30 * day
        var transaction = harness.transaction(
            number == 1 ? chain : id(), original: chain, product: product, purchase: purchase, days: 30, token: token,
            reason: number == 1 ? .purchase : .renewal, signed: signed)
        transaction.billingPlanType = .monthly
        transaction.commitmentInfo = TransactionCommitmentInfo(
            billingPeriodNumber: Int32(number), commitmentExpiresDate: TestPayloads.wholeMilliseconds(start + 365 * day),
            commitmentPrice: 119_880, totalBillingPeriods: 12)
        return transaction
    }

    /// The renewal info of the chain: `cancelled` turns both the plan's and the commitment's switch off.
    static func renewal(
        _ harness: WorkerHarness, chain: String, start: Date, cancelled: Bool, signed: Date
    ) -> JWSRenewalInfoDecodedPayload {
        var renewal = harness.renewalInfo(original: chain, product: product, autoRenew: !cancelled, signed: signed)
        renewal.renewalBillingPlanType = .monthly
        var commitment = RenewalCommitmentInfo()
        commitment.commitmentAutoRenewProductId = product
        commitment.commitmentAutoRenewStatus = cancelled ? .off : .on
        commitment.commitmentRenewalBillingPlanType = .monthly
        commitment.commitmentRenewalDate = TestPayloads.wholeMilliseconds(start + 365 * day)
        commitment.commitmentRenewalPrice = 9990
        renewal.commitmentInfo = commitment
        return renewal
    }

    /// A commitment purchase, two monthly charges, a cancellation inside the commitment (the
    /// plan stays on its paid month) and a refund of one charge (that month only is taken back).
    @Test func monthlyChargesGrantTheirMonthAndACancellationKeepsThePlanToTheCommitmentsEnd() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        try await harness.pool.query(
            """
            INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration,
                                         credits_amount, billing_plan_type)
            VALUES (\(IngressHarness.bundleID), \(Self.product), 'commitment.group', 'pro', 1, 'P1Y', 3000, 'MONTHLY')
            """)
        let token = try await harness.user("carol")
        let now = Date()
        let start = now - 70 * Self.day
        let chain = Self.id()

        // The purchase: the first month's charge grants one month, not the year.
        let first = Self.charge(harness, chain: chain, number: 1, start: start, token: token, signed: now - 5 * Self.hour)
        let subscribed = try await harness.notify(
            .subscribed, .initialBuy, transaction: first,
            renewal: Self.renewal(harness, chain: chain, start: start, cancelled: false, signed: now - 5 * Self.hour))
        #expect(try await harness.outcome(of: subscribed) == .succeeded)
        #expect(
            try await harness.value(
                """
                SELECT billing_plan_type || ':' || commitment_billing_period || '/' || commitment_total_periods || ':'
                       || (commitment_expires_date = \(TestPayloads.wholeMilliseconds(start + 365 * Self.day)))
                  FROM apple_transaction WHERE transaction_id = \(chain)
                """, as: String.self) == "MONTHLY:1/12:true")

        // Two monthly charges, each granting its own month.
        let second = Self.charge(harness, chain: chain, number: 2, start: start, token: token, signed: now - 4 * Self.hour)
        #expect(try await harness.outcome(of: try await harness.notify(.didRenew, transaction: second)) == .succeeded)
        let third = Self.charge(harness, chain: chain, number: 3, start: start, token: token, signed: now - 3 * Self.hour)
        #expect(try await harness.outcome(of: try await harness.notify(.didRenew, transaction: third)) == .succeeded)
        #expect(try await harness.subscription(chain)?.status == "ACTIVE")

        // Cancelled inside the commitment: the chain stays ACTIVE on its paid month, the renewal
        // info keeps the commitment's switch off (the remaining charges are Apple's to take).
        let cancelled = Self.renewal(harness, chain: chain, start: start, cancelled: true, signed: now - 2 * Self.hour)
        let cancellation = try await harness.notify(.didChangeRenewalStatus, .autoRenewDisabled, renewal: cancelled)
        #expect(try await harness.outcome(of: cancellation) == .succeeded)
        let afterCancellation = try #require(try await harness.subscription(chain))
        #expect(afterCancellation.status == "ACTIVE" && !afterCancellation.autoRenewEnabled)
        #expect(afterCancellation.lastTransactionID == third.transactionId)
        #expect(afterCancellation.expiresAt == third.expiresDate)
        // The cancellation carries no transaction: the stored charge's commitment keeps the plan
        // awaiting its next charge (GRACE, not EXPIRED, if Apple's charge fails).
        #expect(
            try await harness.value(
                """
                SELECT commitment_ends_at = \(TestPayloads.wholeMilliseconds(start + 365 * Self.day))
                  FROM user_subscription WHERE original_transaction_id = \(chain)
                """, as: Bool.self) == true)
        #expect(
            try await harness.value(
                """
                SELECT renewal_billing_plan_type || ':' || commitment_auto_renew_enabled || ':' || commitment_renewal_price_milliunits
                  FROM apple_renewal_info WHERE original_transaction_id = \(chain)
                """, as: String.self) == "MONTHLY:false:9990")

        // One grant of 3000 per billed month, each keyed by its own charge, none scheduled for a year.
        #expect(
            try await harness.value(
                """
                SELECT string_agg(reason || ':' || amount / 1000000, ',' ORDER BY created_at, id) FROM credit_grant
                 WHERE original_transaction_id = \(chain)
                """, as: String.self) == "PURCHASE:3000,RENEWAL:3000,RENEWAL:3000")
        #expect(
            try await harness.count("SELECT count(*)::int FROM credit_grant WHERE original_transaction_id = \(chain) AND grant_key LIKE '%:m%'")
                == 0)

        // A refund of the second charge takes back that month only.
        var refunded = second
        refunded.revocationDate = TestPayloads.wholeMilliseconds(now - Self.hour)
        refunded.revocationReason = .refundedDueToIssue
        refunded.signedDate = TestPayloads.wholeMilliseconds(now - Self.hour)
        #expect(try await harness.outcome(of: try await harness.notify(.refund, transaction: refunded)) == .succeeded)
        #expect(
            try await harness.value(
                """
                SELECT string_agg(transaction_id || ':' || (revoked_amount > 0), ',' ORDER BY created_at, id) FROM credit_grant
                 WHERE original_transaction_id = \(chain)
                """, as: String.self)
                == "\(chain):false,\(second.transactionId!):true,\(third.transactionId!):false")
        #expect(try await harness.subscription(chain)?.status == "ACTIVE", "the later charge's month is still paid")
        try await harness.checkInvariants()
    }

    /// Cancelled in month 3, then Apple's charge for month 4 fails (DID_FAIL_TO_RENEW with a grace
    /// period, auto-renew still off), all as signed notifications through the worker. Reads and the
    /// clock job at later instants: GRACE at the month's end with the entitlement active and
    /// renewing, BILLING_RETRY after Apple's grace, never EXPIRED at the month's end.
    @Test func aFailedChargeAfterACancellationInsideTheCommitmentIsGraceThenRetry() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        try await harness.pool.query(
            """
            INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration,
                                         credits_amount, billing_plan_type)
            VALUES (\(IngressHarness.bundleID), \(Self.product), 'commitment.group', 'pro', 1, 'P1Y', 3000, 'MONTHLY')
            """)
        let token = try await harness.user("dana")
        let now = Date()
        let start = now - 70 * Self.day
        let chain = Self.id()
        let first = Self.charge(harness, chain: chain, number: 1, start: start, token: token, signed: now - 5 * Self.hour)
        let subscribed = try await harness.notify(
            .subscribed, .initialBuy, transaction: first,
            renewal: Self.renewal(harness, chain: chain, start: start, cancelled: false, signed: now - 5 * Self.hour))
        #expect(try await harness.outcome(of: subscribed) == .succeeded)
        for number in [2, 3] {
            let charge = Self.charge(harness, chain: chain, number: number, start: start, token: token, signed: now - 4 * Self.hour)
            #expect(try await harness.outcome(of: try await harness.notify(.didRenew, transaction: charge)) == .succeeded)
        }
        let third = Self.charge(harness, chain: chain, number: 3, start: start, token: token, signed: now - 4 * Self.hour)
        let monthEnd = try #require(third.expiresDate)
        let cancelled = Self.renewal(harness, chain: chain, start: start, cancelled: true, signed: now - 3 * Self.hour)
        #expect(
            try await harness.outcome(of: try await harness.notify(.didChangeRenewalStatus, .autoRenewDisabled, renewal: cancelled))
                == .succeeded)
        // Apple tried month 4's charge early and failed; the subscriber's switch is still off.
        var failed = Self.renewal(harness, chain: chain, start: start, cancelled: true, signed: now - 2 * Self.hour)
        failed.isInBillingRetryPeriod = true
        failed.gracePeriodExpiresDate = TestPayloads.wholeMilliseconds(monthEnd + 16 * Self.day)
        #expect(try await harness.outcome(of: try await harness.notify(.didFailToRenew, .gracePeriod, renewal: failed)) == .succeeded)
        let stored = try #require(try await harness.subscription(chain))
        #expect(stored.status == "ACTIVE" && !stored.autoRenewEnabled, "month 3 is paid")
        // The first charge alone (its month long over) expired the chain once; none may follow.
        let expired = "SELECT count(*)::int FROM outbound_event WHERE type = 'entitlement.expired'"
        let expiredBefore = try await harness.count(PostgresQuery(unsafeSQL: expired))

        let subscriptions = SubscriptionStore(pool: harness.pool)
        let inGrace = monthEnd + Self.hour
        #expect(try await subscriptions.subscriptions(userID: "dana").first?.status(at: inGrace) == .grace)
        let items = try await EntitlementStore(pool: harness.pool).entitlements(userID: "dana", now: inGrace)
        #expect(items.first?.active == true && items.first?.willRenew == true, "\(items)")
        #expect(try await SubscriptionClock(pool: harness.pool).advance(now: inGrace) == 1)
        #expect(try await harness.subscription(chain)?.status == "GRACE")
        let inRetry = monthEnd + 17 * Self.day
        #expect(try await SubscriptionClock(pool: harness.pool).advance(now: inRetry) == 1)
        #expect(try await harness.subscription(chain)?.status == "BILLING_RETRY")
        #expect(try await harness.count(PostgresQuery(unsafeSQL: expired)) == expiredBefore, "never expired at the month's end")
    }
}
