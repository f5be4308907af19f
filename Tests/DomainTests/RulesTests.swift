import Domain
import Foundation
import Testing

@Suite struct OrderStateMachineTests {
    @Test func allowedAndForbiddenMoves() {
        #expect(OrderStatus.created.canMove(to: .pending))
        #expect(OrderStatus.pending.canMove(to: .verified))
        #expect(OrderStatus.verified.canMove(to: .fulfilled))
        #expect(OrderStatus.verified.canMove(to: .failedRetryable))
        #expect(OrderStatus.failedRetryable.canMove(to: .fulfilled))
        #expect(OrderStatus.cancelled.canMove(to: .verified), "a real charge reopens a cancelled intent")
        #expect(!OrderStatus.failedRetryable.canMove(to: .created))
        #expect(!OrderStatus.fulfilled.canMove(to: .failed))
        #expect(!OrderStatus.fulfilled.canMove(to: .cancelled))
        #expect(!OrderStatus.verified.canMove(to: .cancelled))
        #expect(OrderStatus.pending.canMove(to: .failed))
    }
}

@Suite struct NotificationMatrixTests {
    @Test func matrixRows() {
        #expect(NotificationMatrix.action(type: "SUBSCRIBED", subtype: "INITIAL_BUY") == .applyTransaction(.initial))
        #expect(NotificationMatrix.action(type: "SUBSCRIBED", subtype: "RESUBSCRIBE") == .applyTransaction(.recovery))
        #expect(NotificationMatrix.action(type: "DID_RENEW", subtype: "BILLING_RECOVERY") == .applyTransaction(.renewal))
        #expect(NotificationMatrix.action(type: "DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE") == .applyTransaction(.change))
        #expect(NotificationMatrix.action(type: "DID_CHANGE_RENEWAL_PREF", subtype: "DOWNGRADE") == .applyRenewalInfo)
        #expect(NotificationMatrix.action(type: "DID_FAIL_TO_RENEW", subtype: "GRACE_PERIOD") == .applyRenewalInfo)
        #expect(NotificationMatrix.action(type: "REFUND", subtype: nil) == .revokeTransaction)
        #expect(NotificationMatrix.action(type: "REFUND_REVERSED", subtype: nil) == .restoreTransaction)
        #expect(NotificationMatrix.action(type: "REFUND_DECLINED", subtype: nil) == .recordOnly)
        #expect(NotificationMatrix.action(type: "TEST", subtype: nil) == .recordOnly)
        #expect(NotificationMatrix.action(type: "SOMETHING_NEW", subtype: "X") == .unknown)
        #expect(NotificationMatrix.alerts(type: "EXPIRED", subtype: "PRODUCT_NOT_FOR_SALE"))
    }
}

@Suite struct CreditRulesTests {
    let pro = CatalogueProduct(
        productID: "com.example.pro.monthly", subscriptionGroupID: "g", planCode: "pro", planLevel: 1,
        duration: .month, creditsAmount: 3000, upgradeGrant: .difference)
    let starter = CatalogueProduct(
        productID: "com.example.starter.monthly", subscriptionGroupID: "g", planCode: "starter", planLevel: 2,
        duration: .month, creditsAmount: 1000)

    func tx(_ id: String) -> TransactionFact {
        TransactionFact(
            environment: "Production", transactionID: id, originalTransactionID: "1", productID: pro.productID,
            purchaseDate: Date(timeIntervalSince1970: 0), expiresDate: nil, signedDate: Date(timeIntervalSince1970: 0))
    }

    @Test func periodGrantsAreKeyedByTransaction() {
        let grants = CreditRules.grants(for: tx("7"), product: pro)
        #expect(grants == [GrantDecision(grantKey: "period:Production:7", pool: .subscription, amount: 3_000_000_000, reason: "PURCHASE")])
        #expect(CreditRules.grants(for: tx("7"), product: pro, replaced: starter).first?.amount == Credits.micro(2000))
        var revoked = tx("8")
        revoked.revocationDate = Date()
        #expect(CreditRules.grants(for: revoked, product: pro).isEmpty)
        var shared = tx("9")
        shared.ownershipType = "FAMILY_SHARED"
        #expect(CreditRules.grants(for: shared, product: pro).isEmpty)
    }

    @Test func yearlyGrantDatesClampToMonthEndIncludingLeapYears() {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let purchase = calendar.date(from: DateComponents(year: 2028, month: 1, day: 31, hour: 10))!
        let dates = CreditRules.yearlyGrantDates(purchase: purchase, expires: calendar.date(byAdding: .year, value: 1, to: purchase))
        #expect(dates.count == 12)
        let days = dates.map { calendar.component(.day, from: $0) }
        #expect(days == [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])  // February 2028 has 29 days
        #expect(calendar.component(.month, from: dates[1]) == 2)
    }

    @Test func usageDrawsInPoolOrderOrNotAtAll() {
        let balances: [CreditPool: MicroCredits] = [.subscription: 500, .welcome: 300, .permanent: 1000]
        #expect(CreditRules.draw(700, from: balances) == [.subscription: 500, .welcome: 200])
        #expect(CreditRules.draw(1801, from: balances) == nil)
        #expect(CreditRules.draw(1800, from: balances) == [.subscription: 500, .welcome: 300, .permanent: 1000])
    }

    @Test func revocationNeverDrivesABalanceNegative() {
        #expect(CreditRules.revocation(granted: 1000, alreadyRevoked: 0, poolBalance: 400) == (400, 600))
        #expect(CreditRules.revocation(granted: 1000, alreadyRevoked: 400, poolBalance: 5000) == (600, 0))
        #expect(CreditRules.revocation(granted: 1000, alreadyRevoked: 0, poolBalance: -3) == (0, 1000))
    }

    @Test func dailyChargeRoundsUp() {
        #expect(CreditRules.dailyCharge(total: 1) == (Credits.micro, Credits.micro - 1))
        #expect(CreditRules.dailyCharge(total: Credits.micro * 3) == (Credits.micro * 3, 0))
        #expect(CreditRules.dailyCharge(total: 0) == (0, 0))
    }

    @Test func planRelations() {
        #expect(PlanRelation.between(current: starter, candidate: pro) == .upgrade)
        #expect(PlanRelation.between(current: pro, candidate: starter) == .downgrade)
        #expect(PlanRelation.between(current: pro, candidate: pro) == .current)
        var yearly = pro
        yearly.productID = "com.example.pro.yearly"
        yearly.duration = .year
        #expect(PlanRelation.between(current: pro, candidate: yearly) == .crossgrade)
        #expect(PlanRelation.between(current: nil, candidate: pro) == .new)
    }
}
