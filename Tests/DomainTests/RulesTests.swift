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
        #expect(NotificationMatrix.action(type: "ONE_TIME_CHARGE", subtype: nil) == .applyTransaction(.initial), "a credit pack")
        #expect(NotificationMatrix.action(type: "SOMETHING_NEW", subtype: "X") == .unknown)
        #expect(NotificationMatrix.alerts(type: "EXPIRED", subtype: "PRODUCT_NOT_FOR_SALE"))
        #expect(NotificationMatrix.action(type: "OFFER_REDEEMED", subtype: "INITIAL_BUY") == .applyTransaction(.initial))
        #expect(NotificationMatrix.action(type: "OFFER_REDEEMED", subtype: "UPGRADE") == .applyTransaction(.change))
        #expect(NotificationMatrix.action(type: "OFFER_REDEEMED", subtype: "DOWNGRADE") == .applyRenewalInfo)
        #expect(NotificationMatrix.action(type: "OFFER_REDEEMED", subtype: nil) == .applyTransaction(.renewal))
    }

    /// Every type and subtype Apple documents has a deliberate handling: none falls through to
    /// `.unknown` (which is still stored and acknowledged, but counted as a surprise).
    @Test func everyDocumentedNotificationHasAHandling() {
        var seen: Set<String> = []
        for (type, subtypes) in NotificationMatrix.documented {
            #expect(seen.insert(type).inserted, "\(type) listed once")
            for subtype in subtypes {
                #expect(NotificationMatrix.action(type: type, subtype: subtype) != .unknown, "\(type)/\(subtype ?? "-")")
            }
        }
        #expect(seen.count == 23)
        #expect(NotificationMatrix.action(type: "RESCIND_CONSENT", subtype: nil) == .rescindConsent)
        for type in ["METADATA_UPDATE", "MIGRATION", "PRICE_CHANGE", "EXTERNAL_PURCHASE_TOKEN"] {
            #expect(NotificationMatrix.action(type: type, subtype: nil) == .recordOnly, "\(type) is stored and acknowledged only")
        }
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
        #expect(
            CreditRules.grants(for: tx("7"), product: pro, change: PlanChange(relation: .upgrade, replaced: [starter])).first?.amount
                == Credits.micro(2000))
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
        let dates = CreditRules.monthlyGrantDates(
            purchase: purchase, months: 12, expires: calendar.date(byAdding: .year, value: 1, to: purchase))
        #expect(dates.count == 12)
        let days = dates.map { calendar.component(.day, from: $0) }
        #expect(days == [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])  // February 2028 has 29 days
        #expect(calendar.component(.month, from: dates[1]) == 2)
    }

    @Test(arguments: [(ProductDuration.twoMonths, 2), (.threeMonths, 3), (.sixMonths, 6), (.year, 12)])
    func longerPlansGrantEachOfTheirMonthsOnTheAnchorDay(duration: ProductDuration, months: Int) {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        // 31 August 2027: the anchor falls on short months (30 September, 28 February 2028 is a
        // leap February: 29) and comes back to the 31st.
        let purchase = calendar.date(from: DateComponents(year: 2027, month: 8, day: 31, hour: 23, minute: 59))!
        let expires = calendar.date(byAdding: .month, value: months, to: purchase)!
        #expect(duration.months == months && duration.grantsMonthly)
        let dates = CreditRules.monthlyGrantDates(purchase: purchase, months: months, expires: expires)
        #expect(dates.count == months)
        let expected = [
            (2027, 8, 31), (2027, 9, 30), (2027, 10, 31), (2027, 11, 30), (2027, 12, 31), (2028, 1, 31), (2028, 2, 29),
            (2028, 3, 31), (2028, 4, 30), (2028, 5, 31), (2028, 6, 30), (2028, 7, 31),
        ].prefix(months)
        #expect(
            dates.map { calendar.dateComponents([.year, .month, .day, .hour, .minute], from: $0) }
                == expected.map { DateComponents(year: $0.0, month: $0.1, day: $0.2, hour: 23, minute: 59) })
        #expect(dates.allSatisfy { $0 < expires })
        // A period cut short (a refund's expiry, an upgrade) grants no month after it ends.
        #expect(CreditRules.monthlyGrantDates(purchase: purchase, months: months, expires: dates[1]).count == 1)
    }

    @Test func durationsAreISO8601AndTheOldSpellingsStillRead() throws {
        #expect(ProductDuration.allCases.map(\.rawValue) == ["P1W", "P1M", "P2M", "P3M", "P6M", "P1Y"])
        #expect(ProductDuration(catalogueValue: "MONTH") == .month)
        #expect(ProductDuration(catalogueValue: "YEAR") == .year)
        #expect(ProductDuration(catalogueValue: "P1D") == nil)
        #expect(ProductDuration(catalogueValue: "WEEK") == nil)
        let decoded = try JSONDecoder().decode([ProductDuration].self, from: Data(#"["YEAR","P6M","P1W"]"#.utf8))
        #expect(decoded == [.year, .sixMonths, .week])
        #expect(String(decoding: try JSONEncoder().encode([ProductDuration.year]), as: UTF8.self) == #"["P1Y"]"#)
        #expect(ProductDuration.week.months == nil && !ProductDuration.week.grantsMonthly && !ProductDuration.month.grantsMonthly)
    }

    @Test func weeklyAndMonthlyPlansGrantOneWholePeriodPerTransactionLongerPlansTheirFirstMonth() {
        for (duration, key) in [
            (ProductDuration.week, "period:Production:1"), (.month, "period:Production:1"), (.threeMonths, "period:Production:1:m0"),
        ] {
            var product = pro
            product.duration = duration
            let grants = CreditRules.grants(for: tx("1"), product: product)
            #expect(grants.map(\.grantKey) == [key])
            #expect(grants.map(\.amount) == [Credits.micro(3000)], "creditsAmount is per week or per month")
        }
    }

    @Test func usageDrawsInPoolOrderOrNotAtAll() {
        let balances: [CreditPool: MicroCredits] = [.subscription: 500, .welcome: 300, .permanent: 1000]
        #expect(CreditRules.draw(700, from: balances) == [.subscription: 500, .welcome: 200])
        #expect(CreditRules.draw(1801, from: balances) == nil)
        #expect(CreditRules.draw(1800, from: balances) == [.subscription: 500, .welcome: 300, .permanent: 1000])
    }

    @Test func theSubscriptionPoolIsSpendableOnlyWithAnEntitledChain() {
        #expect(CreditRules.subscriptionSpendable(chains: []), "an operator's credits without any chain")
        #expect(CreditRules.subscriptionSpendable(chains: [(.active, false)]))
        #expect(CreditRules.subscriptionSpendable(chains: [(.grace, false), (.expired, false)]))
        #expect(!CreditRules.subscriptionSpendable(chains: [(.billingRetry, false)]))
        #expect(CreditRules.subscriptionSpendable(chains: [(.billingRetry, true)]), "the product allows it")
        #expect(!CreditRules.subscriptionSpendable(chains: [(.expired, true), (.revoked, false)]))
        let balances: [CreditPool: MicroCredits] = [.subscription: 500, .welcome: 300, .permanent: 100]
        #expect(CreditRules.draw(350, from: balances, subscriptionSpendable: false) == [.welcome: 300, .permanent: 50])
        #expect(CreditRules.draw(401, from: balances, subscriptionSpendable: false) == nil)
        #expect(CreditRules.draw(350, from: balances) == [.subscription: 350])
    }

    /// A refund takes from its own lot only: what remains of it (times the prorated share, rounded
    /// in the user's favour), once; a reversal gives exactly that back.
    @Test func aRefundTakesWhatRemainsOfItsLotAndAReversalGivesItBack() {
        var lot = GrantRecord(grantKey: "g", userID: "u", pool: .subscription, amount: 1000, remaining: 400)
        #expect(CreditRules.revoke(&lot, percentage: nil) == 400)
        #expect(lot.remaining == 0 && lot.revoked && lot.unrecoverableAmount == 600)
        #expect(CreditRules.revoke(&lot, percentage: nil) == 0, "once")
        #expect(CreditRules.restore(&lot) == 400)
        #expect(lot.remaining == 400 && !lot.revoked && lot.unrecoverableAmount == 0)
        #expect(CreditRules.restore(&lot) == 0, "once")

        var prorated = GrantRecord(grantKey: "h", userID: "u", pool: .subscription, amount: 1001, remaining: 1001)
        #expect(CreditRules.revoke(&prorated, percentage: 50_000) == 500, "half, rounded down: the user keeps the odd micro-credit")
        #expect(prorated.remaining == 501 && prorated.unrecoverableAmount == 0)
        var spent = GrantRecord(grantKey: "i", userID: "u", pool: .subscription, amount: 1000, remaining: 100)
        #expect(CreditRules.revoke(&spent, percentage: 50_000) == 50)
        #expect(spent.unrecoverableAmount == 450, "half of the lot was refunded; 50 could be taken")
        #expect(CreditRules.revoke(&spent, percentage: nil) == 0)
        // Out-of-range percentages are clamped; huge lots do not overflow.
        var huge = GrantRecord(grantKey: "j", userID: "u", pool: .permanent, amount: .max, remaining: .max)
        #expect(CreditRules.revoke(&huge, percentage: 250_000) == .max)
    }

    @Test func usageBurnsTheLotGrantedFirstAndClearingsAreUndoneOnlyForTheirEnding() {
        var lots = [
            GrantRecord(grantKey: "a", userID: "u", pool: .subscription, amount: 300),
            GrantRecord(grantKey: "b", userID: "u", pool: .subscription, amount: 500),
            GrantRecord(grantKey: "c", userID: "u", pool: .subscription, amount: 200),
        ]
        #expect(CreditRules.burn(450, from: &lots) == 450)
        #expect(lots.map(\.remaining) == [0, 350, 200])
        #expect(CreditRules.burn(1000, from: &lots) == 550, "at most what the lots hold")
        #expect(lots.map(\.remaining) == [0, 0, 0])

        var lot = GrantRecord(grantKey: "d", userID: "u", pool: .subscription, amount: 300, remaining: 120)
        #expect(CreditRules.clear(&lot, ending: "Sandbox:1:2:REVOKED") == 120)
        #expect(lot.remaining == 0)
        #expect(CreditRules.restoreClearing(&lot, ending: "Sandbox:1:3:REVOKED") == 0, "another ending")
        #expect(CreditRules.restoreClearing(&lot, ending: "Sandbox:1:2:REVOKED") == 120)
        #expect(lot.remaining == 120 && lot.clearedBy == nil)
        #expect(CreditRules.restoreClearing(&lot, ending: "Sandbox:1:2:REVOKED") == 0, "once")
    }

    @Test func dailyChargeRoundsUp() {
        #expect(CreditRules.dailyCharge(total: 1)! == (Credits.micro, Credits.micro - 1))
        #expect(CreditRules.dailyCharge(total: Credits.micro * 3)! == (Credits.micro * 3, 0))
        #expect(CreditRules.dailyCharge(total: 0)! == (0, 0))
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

    func offer(_ id: String, kind: Int, discount: String, period: String? = nil) -> TransactionFact {
        var transaction = tx(id)
        transaction.offerType = kind
        transaction.offerDiscountType = discount
        transaction.offerPeriod = period
        return transaction
    }

    /// Every offer kind's free period follows its catalogue rule; a kind left out follows
    /// trialGrantsCredits; paid offers always grant.
    @Test func freePeriodsOfEveryOfferKindFollowTheCatalogue() {
        var product = starter
        product.trialGrantsCredits = false
        for kind in 1...4 {
            #expect(CreditRules.grants(for: offer("f\(kind)", kind: kind, discount: "FREE_TRIAL", period: "P1M"), product: product).isEmpty)
            #expect(CreditRules.grants(for: offer("p\(kind)", kind: kind, discount: "PAY_AS_YOU_GO", period: "P3M"), product: product).count == 1)
        }
        product.freePeriodGrantsCredits = [.offerCode: true, .winBack: false]
        #expect(CreditRules.grants(for: offer("a", kind: 3, discount: "FREE_TRIAL", period: "P1M"), product: product).count == 1)
        #expect(CreditRules.grants(for: offer("b", kind: 4, discount: "FREE_TRIAL", period: "P1M"), product: product).isEmpty)
        #expect(CreditRules.grants(for: offer("c", kind: 2, discount: "FREE_TRIAL", period: "P1M"), product: product).isEmpty, "follows trials")
        #expect(CreditRules.grants(for: offer("d", kind: 1, discount: "FREE_TRIAL", period: "P1W"), product: product).isEmpty)
        product.trialGrantsCredits = true
        #expect(CreditRules.grants(for: offer("e", kind: 2, discount: "FREE_TRIAL", period: "P1M"), product: product).count == 1)
        #expect(CreditRules.grants(for: offer("f", kind: 4, discount: "FREE_TRIAL", period: "P1M"), product: product).isEmpty)
        #expect(product.freePeriodGrants(.introductory) && product.freePeriodGrants(.promotional) && !product.freePeriodGrants(.winBack))
    }

    /// One pay-up-front transaction covers its whole offer period: month 0 now (keyed `:m0`), the
    /// rest month by month; pay as you go grants with each paid period like a normal renewal.
    @Test func payUpFrontOffersGrantMonthByMonthOverTheOfferPeriod() {
        #expect(CreditRules.months(in: "P3M") == 3 && CreditRules.months(in: "P1Y") == 12 && CreditRules.months(in: "P2Y") == 24)
        #expect(CreditRules.months(in: "P1W") == nil && CreditRules.months(in: "P3D") == nil && CreditRules.months(in: "3M") == nil)
        #expect(CreditRules.periodMonths(offerDiscountType: "PAY_UP_FRONT", offerPeriod: "P6M", duration: .month) == 6)
        #expect(CreditRules.periodMonths(offerDiscountType: "PAY_AS_YOU_GO", offerPeriod: "P6M", duration: .month) == 1)
        #expect(CreditRules.periodMonths(offerDiscountType: nil, offerPeriod: nil, duration: .year) == 12)
        #expect(CreditRules.periodMonths(offerDiscountType: "FREE_TRIAL", offerPeriod: "P1W", duration: .year) == nil)
        let upFront = CreditRules.grants(for: offer("9", kind: 1, discount: "PAY_UP_FRONT", period: "P3M"), product: starter)
        #expect(upFront.map(\.grantKey) == ["period:Production:9:m0"])
        #expect(upFront.map(\.amount) == [Credits.micro(1000)])
        let asYouGo = CreditRules.grants(for: offer("10", kind: 1, discount: "PAY_AS_YOU_GO", period: "P3M"), product: starter)
        #expect(asYouGo.map(\.grantKey) == ["period:Production:10"])
    }

    @Test func changeTimingsFollowApple() {
        var yearly = pro
        yearly.productID = "com.example.pro.yearly"
        yearly.duration = .year
        var twin = pro
        twin.productID = "com.example.pro.monthly2"
        #expect(ChangeTiming.of(current: starter, candidate: pro) == .now, "higher level")
        #expect(ChangeTiming.of(current: pro, candidate: twin) == .now, "same level, same duration")
        #expect(ChangeTiming.of(current: pro, candidate: yearly) == .nextRenewal, "same level, other duration")
        #expect(ChangeTiming.of(current: pro, candidate: starter) == .nextRenewal, "lower level")
        #expect(ChangeTiming.of(current: pro, candidate: pro) == nil, "the current product")
        #expect(ChangeTiming.of(current: nil, candidate: pro) == .now, "a first purchase")
        #expect(ChangeTiming.now.rawValue == "NOW" && ChangeTiming.nextRenewal.rawValue == "NEXT_RENEWAL")
    }

    @Test func sameLevelChangesGrantOnlyTheDifferenceWhateverTheUpgradeRule() {
        var cheaper = pro
        cheaper.creditsAmount = 1000
        cheaper.upgradeGrant = .full
        var dearer = cheaper
        dearer.creditsAmount = 1500
        let up = CreditRules.grants(for: tx("1"), product: dearer, change: PlanChange(relation: .crossgrade, replaced: [cheaper]))
        #expect(up.map(\.amount) == [Credits.micro(500)] && up.map(\.reason) == ["CROSSGRADE"])
        #expect(CreditRules.grants(for: tx("2"), product: cheaper, change: PlanChange(relation: .crossgrade, replaced: [dearer])).isEmpty)
        #expect(
            CreditRules.grants(for: tx("3"), product: dearer, change: PlanChange(relation: .crossgrade, replaced: [cheaper, dearer]))
                .isEmpty)
        // A FULL upgrade still grants the whole amount.
        #expect(
            CreditRules.grants(for: tx("4"), product: dearer, change: PlanChange(relation: .upgrade, replaced: [cheaper])).map(\.amount)
                == [Credits.micro(1500)])
    }
}
