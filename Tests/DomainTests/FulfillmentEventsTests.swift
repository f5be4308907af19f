import Domain
import Foundation
import Testing

/// The outbound events fulfillment plans: what each change tells the app, once per key whatever
/// the arrival order and redelivery of Apple's facts.
@Suite struct FulfillmentEventsTests {
    let planner = FulfillmentPlannerTests()
    var t0: Date { planner.t0 }
    let day: TimeInterval = 86_400
    let refundSource = FactSource.notification(type: "REFUND", subtype: nil)

    /// The outbox as the store keeps it: one event per key, in the order appended.
    struct Outbox {
        var events: [OutboundEvent] = []
        /// Appends the new keys; returns how many were new.
        @discardableResult
        mutating func append(_ planned: [OutboundEvent]) -> Int {
            let fresh = planned.filter { event in !events.contains { $0.key == event.key } }
            events += fresh
            return fresh.count
        }
        var types: [String] { events.map(\.type.rawValue) }
    }

    func facts() -> [(FactSource, TransactionFact)] {
        let purchase = planner.tx("1000", purchase: t0)
        let renewal = planner.tx("1001", purchase: t0 + 30 * day, reason: "RENEWAL", signed: t0 + 30 * day)
        var refunded = renewal
        refunded.revocationDate = t0 + 35 * day
        refunded.signedDate = t0 + 35 * day
        return [(planner.initialBuy, purchase), (planner.didRenew, renewal), (refundSource, refunded)]
    }

    @Test func purchaseRenewalAndRefundTellEachChangeOnce() {
        var store = planner.store()
        var outbox = Outbox()
        let steps = facts()
        let nows = [t0, t0 + 30 * day, t0 + 35 * day]
        for ((source, fact), now) in zip(steps, nows) {
            outbox.append(store.apply(source, fact, now: now).events)
            // Redelivered at once or later: nothing new.
            #expect(outbox.append(store.apply(source, fact, now: now).events) == 0)
        }
        #expect(
            outbox.types == [
                "entitlement.granted", "order.fulfilled", "credits.granted",
                "entitlement.renewed", "order.fulfilled", "credits.granted",
                "entitlement.revoked", "subscription.refunded",
            ])
        #expect(outbox.events.allSatisfy { $0.userID == "alice" && $0.environment == "Sandbox" })
        let granted = outbox.events[0]
        #expect(granted.occurredAt == t0)
        #expect(granted.data["entitlement"] == .string("starter"))
        #expect(granted.data["productId"] == .string(Catalogue.starter.productID))
        #expect(granted.data["originalTransactionId"] == .string("1000"))
        #expect(granted.data["status"] == .string("ACTIVE"))
        #expect(granted.data["expiresAt"] == OutboundValue(t0 + 30 * day))
        #expect(outbox.events[1].data["orderNo"] == .string("RCV-S-1000"))
        #expect(outbox.events[2].data["amount"] == .string("1000"))
        #expect(outbox.events[2].data["microCredits"] == .integer(Credits.micro(1000)))
        #expect(outbox.events[2].data["grantKey"] == .string("period:Sandbox:1000"))
        #expect(outbox.events[6].data["status"] == .string("REVOKED"))
        #expect(outbox.events[7].data["transactionId"] == .string("1001"))
    }

    /// In every arrival order, each delivered twice: the second delivery adds nothing, the orders,
    /// grants and refund are each told once, and replaying the same order gives the same events.
    @Test func everyArrivalOrderTellsEachChangeOnceAndReplaysTheSame() {
        let steps = facts()
        let now = t0 + 40 * day
        for permutation in planner.permutations(Array(steps.indices)) {
            func run() -> (Outbox, MemoryStore) {
                var store = planner.store()
                var outbox = Outbox()
                for index in permutation {
                    let (source, fact) = steps[index]
                    outbox.append(store.apply(source, fact, now: now).events)
                }
                for index in permutation.reversed() {
                    let (source, fact) = steps[index]
                    #expect(outbox.append(store.apply(source, fact, now: now).events) == 0, "order \(permutation)")
                }
                return (outbox, store)
            }
            let (outbox, store) = run()
            #expect(run().0.events.map(\.key) == outbox.events.map(\.key), "order \(permutation)")
            // Every order and lot the facts made is told once; the refund once.
            #expect(outbox.types.filter { $0 == "order.fulfilled" }.count == store.orders.count, "order \(permutation)")
            #expect(outbox.types.filter { $0 == "credits.granted" }.count == store.lots.count, "order \(permutation)")
            #expect(outbox.types.filter { $0 == "subscription.refunded" }.count == 1, "order \(permutation)")
            #expect(outbox.types.filter { $0 == "entitlement.granted" }.count <= 1, "order \(permutation)")
            // Whatever the order, the last entitlement event tells the chain's final status.
            let last = outbox.events.last { $0.type.rawValue.hasPrefix("entitlement.") }
            #expect(last?.data["status"] == store.subscription.map { .string($0.state.status.rawValue) }, "order \(permutation)")
        }
    }

    @Test func aRefusedUploadForAnOrderTellsTheOrderFailed() {
        var store = planner.store()
        store.orders.append(
            OrderRecord(
                orderNo: "PAY1", userID: "alice", productID: Catalogue.pro.productID, type: .initial, status: .created,
                transactionID: nil, createdAt: t0))
        let plan = store.apply(.clientSubmission(orderNo: "PAY1", submitter: "alice"), planner.tx("2000", purchase: t0), now: t0)
        #expect(plan.verdict == .refused(code: "ORDER_PRODUCT_MISMATCH", reason: "the order is for another product"))
        #expect(plan.events.map(\.type) == [.orderFailed])
        #expect(plan.events.first?.key == "order.failed:PAY1")
        #expect(plan.events.first?.data["status"] == .string("FAILED"))
        #expect(plan.events.first?.data["orderNo"] == .string("PAY1"))
        #expect(plan.events.first?.data["code"] == .string("ORDER_PRODUCT_MISMATCH"))
        #expect(plan.events.first?.data["transactionId"] == .string("2000"))
    }

    @Test func creditEventsCarryExactDecimalAmounts() {
        let event = CreditEvents.granted(
            userID: "u", environment: "Production", grantKey: "welcome:u", pool: .welcome, amount: 1_500_001, reason: "WELCOME",
            originalTransactionID: nil, transactionID: nil, now: t0)
        #expect(event.data["amount"] == .string("1.500001"))
        #expect(event.key == "credits.granted:welcome:u")
        #expect(Credits.decimal(-2_500_000) == "-2.5")
        #expect(Credits.decimal(3_000_000) == "3")
    }
}
