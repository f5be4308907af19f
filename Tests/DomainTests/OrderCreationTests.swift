import Domain
import Foundation
import Testing

/// The order-creation policy, without a database.
@Suite struct OrderCreationTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let product = OrderCreation.Product(productID: "starter", subscriptionGroupID: "g1")

    func inputs(
        product: OrderCreation.Product? = product, sameRequest: OrderCreation.ExistingOrder? = nil, current: String? = nil,
        open: [OrderCreation.ExistingOrder] = [], window: TimeInterval = 900
    ) -> OrderCreation.Inputs {
        OrderCreation.Inputs(
            requestedProductID: "starter", product: product, sameRequest: sameRequest, currentProductID: current,
            openOrders: open, now: Self.now, openOrderWindow: window)
    }

    func order(_ no: String, product: String = "starter", _ status: OrderStatus = .created, age: TimeInterval)
        -> OrderCreation.ExistingOrder
    {
        OrderCreation.ExistingOrder(orderNo: no, productID: product, status: status, createdAt: Self.now - age)
    }

    @Test func aFirstPurchaseIsAnInitialOrder() {
        #expect(OrderCreation.decide(inputs()) == .create(.initial, superseding: []))
    }

    /// A credit pack is bought as often as wanted, also while another purchase is open; a
    /// retried click still answers its first order.
    @Test func aCreditPackIsAlwaysANewInitialOrder() {
        let pack = OrderCreation.Product(productID: "starter", subscriptionGroupID: "", kind: .consumable)
        #expect(OrderCreation.decide(inputs(product: pack, open: [order("o1", .pending, age: 10)])) == .create(.initial, superseding: []))
        #expect(OrderCreation.decide(inputs(product: pack, sameRequest: order("o2", age: 10))) == .replay(orderNo: "o2"))
    }

    @Test func aProductNotOnSaleIsRefusedBeforeAnythingElse() {
        let decision = OrderCreation.decide(inputs(product: nil, sameRequest: order("o1", age: 10)))
        #expect(decision == .refuse(.productUnavailable))
    }

    @Test func theSameRequestIsReplayedForTheSameProductOnly() {
        #expect(OrderCreation.decide(inputs(sameRequest: order("o1", age: 10))) == .replay(orderNo: "o1"))
        // Replayed whatever the order became since, and before any other rule.
        let cancelled = order("o1", .cancelled, age: 10)
        #expect(OrderCreation.decide(inputs(sameRequest: cancelled, current: "starter")) == .replay(orderNo: "o1"))
        let other = order("o1", product: "pro", age: 10)
        #expect(OrderCreation.decide(inputs(sameRequest: other)) == .refuse(.requestUsedForAnotherProduct))
    }

    @Test func aSubscriberOfTheProductIsRefusedAndOfAnotherOneChangesPlan() {
        #expect(OrderCreation.decide(inputs(current: "starter")) == .refuse(.alreadySubscribed))
        #expect(OrderCreation.decide(inputs(current: "pro")) == .create(.change, superseding: []))
    }

    @Test func aPendingPurchaseBlocksWhateverItsAge() {
        let pending = order("o1", .pending, age: 7 * 86_400)
        #expect(OrderCreation.decide(inputs(open: [pending])) == .refuse(.purchasePending))
        #expect(OrderCreation.decide(inputs(open: [pending], window: 0)) == .refuse(.purchasePending))
    }

    @Test func anOpenOrderBlocksWithinTheWindowAndIsSupersededAfterIt() {
        let recent = order("o1", age: 60)
        #expect(OrderCreation.decide(inputs(open: [recent])) == .refuse(.anotherOrderOpen))
        let old = order("o2", age: 3600)
        #expect(OrderCreation.decide(inputs(open: [old])) == .create(.initial, superseding: [old]))
        // A window of 0 supersedes at once.
        #expect(OrderCreation.decide(inputs(open: [recent], window: 0)) == .create(.initial, superseding: [recent]))
        // Exactly at the end of the window: no longer blocking.
        let edge = order("o3", age: 900)
        #expect(OrderCreation.decide(inputs(open: [edge])) == .create(.initial, superseding: [edge]))
    }

    @Test func everyStaleOrderIsSupersededAndTheFirstBlockingOneDecides() {
        let old1 = order("o1", age: 3600)
        let old2 = order("o2", age: 7200)
        #expect(
            OrderCreation.decide(inputs(current: "pro", open: [old1, old2])) == .create(.change, superseding: [old1, old2]))
        let pending = order("o3", .pending, age: 10)
        let recent = order("o4", age: 10)
        #expect(OrderCreation.decide(inputs(open: [old1, pending, recent])) == .refuse(.purchasePending))
        #expect(OrderCreation.decide(inputs(open: [old1, recent, pending])) == .refuse(.anotherOrderOpen))
    }
}

/// Deferred changes: Apple charges nothing when the user picks one, so no order is opened and
/// nothing holds the subscription group.
@Suite struct DeferredChangeTests {
    static let starter = OrderCreation.Product(productID: "starter", subscriptionGroupID: "g1", planLevel: 2, duration: .month)

    func decide(from current: OrderCreation.Product, open: [OrderCreation.ExistingOrder] = []) -> OrderCreation.Decision {
        OrderCreation.decide(
            OrderCreation.Inputs(
                requestedProductID: "starter", product: Self.starter, currentProductID: current.productID, currentProduct: current,
                openOrders: open, now: OrderCreationTests.now, openOrderWindow: 900))
    }

    @Test func aLowerLevelOrAnotherDurationOfTheSameLevelOpensNoOrder() {
        let proMonthly = OrderCreation.Product(productID: "pro", subscriptionGroupID: "g1", planLevel: 1, duration: .month)
        let starterYearly = OrderCreation.Product(productID: "starter.yearly", subscriptionGroupID: "g1", planLevel: 2, duration: .year)
        #expect(decide(from: proMonthly) == .refuse(.changeDeferred))
        #expect(decide(from: starterYearly) == .refuse(.changeDeferred))
        // Whatever else is open in the group: it blocks nothing, and nothing blocks it.
        let open = OrderCreation.ExistingOrder(orderNo: "o1", productID: "pro", status: .pending, createdAt: OrderCreationTests.now)
        #expect(decide(from: proMonthly, open: [open]) == .refuse(.changeDeferred))
    }

    @Test func aChangeAppleAppliesAtOnceIsAChangeOrder() {
        let team = OrderCreation.Product(productID: "team", subscriptionGroupID: "g1", planLevel: 2, duration: .month)
        let basic = OrderCreation.Product(productID: "basic", subscriptionGroupID: "g1", planLevel: 3, duration: .year)
        #expect(decide(from: team) == .create(.change, superseding: []))
        #expect(decide(from: basic) == .create(.change, superseding: []))
        // The timing is the catalogue's, the same the products endpoint shows.
        #expect(ChangeTiming.between(currentLevel: 1, currentDuration: .month, candidateLevel: 2, candidateDuration: .month) == .nextRenewal)
        #expect(ChangeTiming.between(currentLevel: 2, currentDuration: .year, candidateLevel: 2, candidateDuration: .month) == .nextRenewal)
        #expect(ChangeTiming.between(currentLevel: 3, currentDuration: .year, candidateLevel: 2, candidateDuration: .month) == .now)
    }
}
