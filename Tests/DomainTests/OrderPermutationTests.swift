import Domain
import Foundation
import Testing

/// An order's end in every arrival order of the client's order, Apple's purchase, its refund and
/// the next renewal: a revoked transaction never fulfils an order nor counts as delivered, and
/// the rest of the state does not depend on the order the facts came in.
@Suite struct OrderPermutationTests {
    let planner = FulfillmentPlannerTests()
    var t0: Date { planner.t0 }
    let day: TimeInterval = 86_400

    enum Step: String, CaseIterable {
        case order, purchase, refund, renewal
    }

    static func permutations<T>(_ items: [T]) -> [[T]] {
        guard items.count > 1 else { return [items] }
        return items.indices.flatMap { index in
            var rest = items
            let first = rest.remove(at: index)
            return permutations(rest).map { [first] + $0 }
        }
    }

    /// Runs the steps in `arrival`, each processed a month after the purchase; returns the store
    /// and the outbound event keys by type (each key once, as the outbox keeps them).
    func run(_ arrival: [Step]) -> (store: MemoryStore, events: [String: Set<String>]) {
        var store = planner.store()
        var events: [String: Set<String>] = [:]
        let purchase = planner.tx("1000", purchase: t0)
        var refunded = purchase
        refunded.revocationDate = t0 + 2 * day
        refunded.signedDate = t0 + 2 * day
        let renewal = planner.tx("1001", purchase: t0 + 30 * day, reason: "RENEWAL", signed: t0 + 30 * day)
        let now = t0 + 31 * day
        for step in arrival {
            let plan: FulfillmentPlan
            switch step {
            case .order:
                // Before the purchase it is the click that led to the charge; after it, a later
                // click (created then, so not that charge's order).
                let beforeCharge = arrival.firstIndex(of: .order)! < arrival.firstIndex(of: .purchase)!
                store.openOrder("PAY1", Catalogue.starter, createdAt: beforeCharge ? t0 - 60 : now)
                continue
            case .purchase: plan = store.apply(planner.initialBuy, purchase, now: now)
            case .refund: plan = store.apply(.notification(type: "REFUND", subtype: nil), refunded, now: now)
            case .renewal: plan = store.apply(planner.didRenew, renewal, now: now)
            }
            for event in plan.events { events[event.type.rawValue, default: []].insert(event.key) }
        }
        return (store, events)
    }

    @Test func everyArrivalOrderEndsTheOrderRight() {
        let all = Self.permutations(Step.allCases)
        #expect(all.count == 24)
        let reference = run(Step.allCases).store
        for arrival in all {
            let (store, events) = run(arrival)
            let position = { (step: Step) in arrival.firstIndex(of: step)! }
            let refundFirst = position(.refund) < position(.purchase)
            let orderKnown = position(.order) < position(.purchase)
            let label = arrival.map(\.rawValue).joined(separator: ",")
            // The consumption answer's rule: delivered when granted or its order is FULFILLED.
            let fulfilled = store.orders.filter { $0.transactionID == "1000" && $0.status == .fulfilled }
            let granted = store.lots.contains { $0.transactionID == "1000" && $0.record.amount > 0 }
            #expect((granted || !fulfilled.isEmpty) == !refundFirst, "\(label)")
            if refundFirst {
                #expect(fulfilled.isEmpty, "\(label)")
            } else {
                #expect(fulfilled.map(\.orderNo) == [orderKnown ? "PAY1" : "RCV-S-1000"], "\(label)")
            }
            // The click's order: completed by the charge, or ended by its refund; a click after
            // the charge stays open (until it expires).
            let pay1 = store.orders.first { $0.orderNo == "PAY1" }
            let expected: OrderStatus = !orderKnown ? .created : refundFirst ? .failed : .fulfilled
            #expect(pay1?.status == expected, "\(label)")
            #expect(events["order.failed"] == (expected == .failed ? ["order.failed:PAY1"] : nil), "\(label)")
            // The renewal is always its own order, granted once; the refunded period keeps nothing.
            #expect(store.orders.filter { $0.type == .renewal && $0.status == .fulfilled }.map(\.transactionID) == ["1001"], "\(label)")
            #expect(store.balance == Credits.micro(1000), "\(label)")
            #expect(store.subscription?.state == reference.subscription?.state, "\(label)")
            #expect(store.subscription?.state.status == .active, "\(label)")
        }
    }

    @Test func replayingEveryFactAfterwardsChangesNothing() {
        for arrival in Self.permutations(Step.allCases) {
            var (store, _) = run(arrival)
            let before = store.orders
            let purchase = planner.tx("1000", purchase: t0)
            let replay = store.apply(planner.initialBuy, purchase, now: t0 + 32 * day)
            #expect(replay.failedOrder == nil && replay.order == nil && replay.grants.isEmpty, "\(arrival)")
            #expect(store.orders == before, "\(arrival)")
        }
    }

    /// Apple reverses the refund after the purchase was held back by it: the charge counts again,
    /// as a RECOVERY order (the click's order had ended FAILED), granted once.
    @Test func aReversedRefundAppliesWhatTheRevocationHeldBack() {
        var store = planner.store()
        store.openOrder("PAY1", Catalogue.starter, createdAt: t0 - 60)
        let purchase = planner.tx("1000", purchase: t0)
        var refunded = purchase
        refunded.revocationDate = t0 + 2 * day
        refunded.signedDate = t0 + 2 * day
        var reversed = purchase
        reversed.signedDate = t0 + 3 * day
        store.apply(.notification(type: "REFUND", subtype: nil), refunded, now: t0 + 3 * day)
        store.apply(planner.initialBuy, purchase, now: t0 + 3 * day)
        #expect(store.orders.map(\.status) == [.failed])
        let reversal = store.apply(.notification(type: "REFUND_REVERSED", subtype: nil), reversed, now: t0 + 3 * day)
        #expect(reversal.order?.order.orderNo == "RCV-S-1000" && reversal.order?.order.status == .fulfilled)
        #expect(reversal.grants.map(\.amount) == [Credits.micro(1000)])
        #expect(store.apply(planner.initialBuy, purchase, now: t0 + 3 * day).writesNothing)
        #expect(store.balance == Credits.micro(1000))
        #expect(store.subscription?.state.status == .active)
    }
}
