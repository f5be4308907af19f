import AppStore
import AppStoreTestSupport
import Foundation
import Postgres
import Testing
import TestSupport

/// The notification matrix through the real pair: Apple's notifications POSTed to the ingress,
/// applied by a worker, checked along the whole evidence chain.
@Suite(.timeLimit(.minutes(3)))
struct FulfillmentNotificationTests {
    let day: TimeInterval = 86_400

    static func id() -> String { String(UInt64.random(in: 2_000_000_000_000_000...2_999_999_999_999_999)) }

    /// Scenario 4: the app was killed after paying; only SUBSCRIBED arrives and completes the order.
    @Test func initialBuyCompletesTheOpenOrderActivatesAndGrantsOnce() async throws {
        let harness = try await WorkerHarness.start()
        defer { Task { await harness.stop() } }
        let (orderNo, token) = try await harness.order("alice")
        let id = Self.id()
        let purchase = harness.transaction(id, token: token)
        let uuid = try await harness.notify(.subscribed, .initialBuy, transaction: purchase, renewal: harness.renewalInfo(original: id))
        #expect(try await harness.outcome(of: uuid) == .succeeded)

        #expect(try await harness.value(
            "SELECT status || ':' || transaction_id || ':' || environment FROM payment_order WHERE order_no = \(orderNo)",
            as: String.self) == "FULFILLED:\(id):Sandbox")
        #expect(try await harness.value(
            "SELECT user_id FROM apple_transaction WHERE transaction_id = \(id)", as: String.self) == "alice")
        let subscription = try #require(try await harness.subscription(id))
        #expect(subscription.status == "ACTIVE")
        #expect(subscription.userID == "alice")
        #expect(subscription.activeProductID == WorkerHarness.starter)
        #expect(subscription.autoRenewEnabled)
        #expect(try await harness.balance("alice") == 1000)
        #expect(try await harness.value(
            "SELECT string_agg(coalesce(previous_status, '-') || '>' || current_status, ',' ORDER BY id) FROM status_history WHERE entity_key = \(orderNo)",
            as: String.self) == "->CREATED,CREATED>VERIFIED,VERIFIED>FULFILLED")
        #expect(try await harness.value(
            "SELECT cause FROM status_history WHERE entity_type = 'SUBSCRIPTION' AND entity_key = \("Sandbox:" + id)",
            as: String.self) == "apple.SUBSCRIBED.INITIAL_BUY")

        // Apple delivers it again (a new notification UUID for the same transaction): nothing new.
        let again = try await harness.notify(.subscribed, .initialBuy, transaction: purchase)
        #expect(try await harness.outcome(of: again) == .succeeded)
        #expect(try await harness.balance("alice") == 1000)
        #expect(try await harness.count("SELECT count(*) FROM credit_grant") == 1)
        #expect(try await harness.count("SELECT count(*) FROM payment_order") == 1)
        try await harness.checkInvariants()
    }
}
