import Domain
import Events
import Foundation
import Postgres
import Storage
import TestSupport
import Testing

@testable import FulfillmentApp

/// How orders end, as the worker stores them on a real PostgreSQL: a refund known before its
/// purchase fulfils no order, a refused upload that can never pass ends its order FAILED with its
/// code, history row and `order.failed` event, and a refusal that may pass later leaves it open.
@Suite(.timeLimit(.minutes(2)))
struct OrderOutcomeTests {
    /// Creates alice's order as the route does, dated an hour back: the click before the charge.
    func order(_ fixture: Fixture, user: String = "alice", request: String = "r1") async throws -> String {
        let outcome = try await OrderStore(pool: fixture.database.pool).create(
            OrderRequest(
                userID: user, productID: FulfillmentBatchTests.product, requestID: request, appKey: FulfillmentBatchTests.appKey,
                environment: "Sandbox", newOrderNo: "PAY-\(user)-\(request)", now: Date(), openOrderWindow: 900))
        guard case .created(let order) = outcome else { throw OrderRefused(outcome: "\(outcome)") }
        try await fixture.database.pool.query(
            "UPDATE payment_order SET created_at = now() - interval '1 hour' WHERE order_no = \(order.orderNo)")
        return order.orderNo
    }

    func stored(_ fixture: Fixture, _ orderNo: String, user: String = "alice") async throws -> StoredOrder {
        try #require(try await OrderStore(pool: fixture.database.pool).order(orderNo, userID: user))
    }

    /// Stores uploads for orders as the ingress does and claims them, verified.
    func upload(_ fixture: Fixture, _ fact: Fact, orderNo: String, by user: String) async throws -> [PendingEvent] {
        let transaction = fact.transaction.fact
        let stored = try await fixture.events.insertSubmission(
            NewSubmission(
                kind: "CLIENT", userID: user, orderNo: orderNo, environment: transaction.environment,
                transactionID: transaction.transactionID, originalTransactionID: transaction.originalTransactionID,
                payloadHash: "upload-\(orderNo)-\(transaction.transactionID)", sealedPayload: [], payloadKeyID: "none",
                traceID: nil))
        let claimed = try await fixture.events.claim(
            [EventEnvelope(kind: .submission, eventID: stored.eventID, traceID: nil)], owner: FulfillmentBatchTests.owner,
            lease: .seconds(60))
        return [
            PendingEvent(
                event: try #require(claimed.first ?? nil),
                verified: VerifiedEvent(
                    source: .clientSubmission(orderNo: orderNo, submitter: user), transaction: fact.transaction,
                    renewal: fact.renewal),
                now: Date())
        ]
    }

    func history(_ fixture: Fixture, _ orderNo: String) async throws -> [String] {
        try await fixture.database.pool.query(
            """
            SELECT coalesce(previous_status, '-') || '>' || current_status || ' ' || cause AS step FROM status_history
             WHERE entity_type = 'ORDER' AND entity_key = \(orderNo) ORDER BY id
            """
        ).map { try $0.decode("step") }
    }

    @Test func aRefundBeforeItsPurchaseEndsTheOrderFailedAndDeliversNothing() async throws {
        try await Fixture.with { fixture in
            let alice = try await fixture.user("alice")
            let orderNo = try await order(fixture)
            let purchase = Fact.purchase(original: "5001", transaction: "5001", token: alice, daysAgo: 0.01)
            let refund = try await fixture.apply(try await fixture.claim([purchase.refund()]))
            #expect(refund.map(\.verdict) == [.applied])
            let late = try await fixture.apply(try await fixture.claim([purchase]))
            #expect(late.map(\.verdict) == [.applied] && late.map(\.granted) == [0])

            let order = try await stored(fixture, orderNo)
            #expect(order.status == .failed)
            #expect(order.failureCode == "TRANSACTION_REVOKED")
            #expect(order.transactionID == nil)
            #expect(try await fixture.count("SELECT count(*) FROM payment_order WHERE status = 'FULFILLED'") == 0)
            #expect(try await fixture.count("SELECT count(*) FROM credit_grant") == 0)
            #expect(try await history(fixture, orderNo) == ["->CREATED client.create", "CREATED>FAILED apple.SUBSCRIBED.INITIAL_BUY"])
            #expect(
                try await fixture.count(
                    "SELECT count(*) FROM outbound_event WHERE type = 'order.failed' AND user_id = 'alice'") == 1)
            // The purchase delivered again changes nothing more.
            _ = try await fixture.apply(try await fixture.claim([purchase]))
            #expect(try await history(fixture, orderNo).count == 2)
            #expect(try await fixture.count("SELECT count(*) FROM outbound_event WHERE type = 'order.failed'") == 1)
        }
    }

    @Test func aPurchaseBeforeItsRefundFulfilsTheOrderAndTheRefundTakesTheCredits() async throws {
        try await Fixture.with { fixture in
            let alice = try await fixture.user("alice")
            let orderNo = try await order(fixture)
            let purchase = Fact.purchase(original: "5002", transaction: "5002", token: alice, daysAgo: 0.01)
            _ = try await fixture.apply(try await fixture.claim([purchase]))
            _ = try await fixture.apply(try await fixture.claim([purchase.refund()]))
            let order = try await stored(fixture, orderNo)
            #expect(order.status == .fulfilled && order.transactionID == "5002" && order.failureCode == nil)
            #expect(try await fixture.count("SELECT count(*) FROM credit_grant WHERE remaining = 0 AND revoked_amount > 0") == 1)
            #expect(try await fixture.count("SELECT count(*) FROM outbound_event WHERE type = 'order.failed'") == 0)
        }
    }

    @Test func aRefusedUploadThatCanNeverPassEndsTheOrderFailed() async throws {
        try await Fixture.with { fixture in
            let alice = try await fixture.user("alice")
            let orderNo = try await order(fixture)
            let expired = Fact.purchase(original: "5003", transaction: "5003", token: alice, daysAgo: 40)
            let refused = try await fixture.apply(try await upload(fixture, expired, orderNo: orderNo, by: "alice"))
            #expect(
                refused.map(\.verdict) == [
                    .refused(code: "TRANSACTION_EXPIRED", reason: "an expired transaction cannot fulfil a new order")
                ])
            let order = try await stored(fixture, orderNo)
            #expect(order.status == .failed && order.failureCode == "TRANSACTION_EXPIRED")
            #expect(try await history(fixture, orderNo).last == "CREATED>FAILED client.upload")
            let event = try await fixture.database.pool.query(
                "SELECT data->>'code' AS code, data->>'status' AS status FROM outbound_event WHERE type = 'order.failed'")
            #expect(event.count == 1)
            #expect(try event.first?.decode("code", as: String.self) == "TRANSACTION_EXPIRED")
            #expect(try event.first?.decode("status", as: String.self) == "FAILED")
            #expect(try await fixture.count("SELECT count(*) FROM inbound_event WHERE error_code = 'TRANSACTION_EXPIRED'") == 1)
        }
    }

    @Test func aRefusalThatMayPassLaterLeavesTheOrderOpen() async throws {
        try await Fixture.with { fixture in
            _ = try await fixture.user("alice")
            let bob = try await fixture.user("bob")
            let orderNo = try await order(fixture)
            // Bob's purchase uploaded by alice: an account conflict, for an operator.
            let bobs = Fact.purchase(original: "5004", transaction: "5004", token: bob, daysAgo: 0.01)
            let conflict = try await fixture.apply(try await upload(fixture, bobs, orderNo: orderNo, by: "alice"))
            #expect(conflict.map(\.verdict) == [.accountConflict(attributed: "bob", other: "alice")])
            let order = try await stored(fixture, orderNo)
            #expect(order.status == .created && order.failureCode == nil)
            #expect(try await fixture.count("SELECT count(*) FROM outbound_event WHERE type = 'order.failed'") == 0)
        }
    }

    @Test func aSecondAccountPayingOnTheChainIsToldAndListedForAnOperator() async throws {
        try await Fixture.with { fixture in
            let alice = try await fixture.user("alice")
            let bob = try await fixture.user("bob")
            let first = Fact.purchase(original: "5005", transaction: "5005", token: alice, daysAgo: 40)
            _ = try await fixture.apply(try await fixture.claim([first]))
            // Bob's business account pays on the same Apple Account after alice's period ended.
            let resubscribe = Fact.fact("SUBSCRIBED", "RESUBSCRIBE", original: "5005", transaction: "5005002", token: bob, daysAgo: 0.01)
            let conflict = try await fixture.apply(try await fixture.claim([resubscribe]))
            #expect(conflict.map(\.verdict) == [.accountConflict(attributed: "bob", other: "alice")])
            #expect(try await fixture.count("SELECT count(*) FROM user_subscription WHERE frozen_reason IS NOT NULL") == 1)
            let event = try await fixture.database.pool.query(
                "SELECT user_id, data->>'otherUserId' AS other FROM outbound_event WHERE type = 'account.conflict'")
            #expect(try event.map { try $0.decode("user_id", as: String.self) } == ["bob"])
            #expect(try event.first?.decode("other", as: String.self) == "alice")
            // Apple's redelivery tells nothing new.
            _ = try await fixture.apply(try await fixture.claim([resubscribe]))
            #expect(try await fixture.count("SELECT count(*) FROM outbound_event WHERE type = 'account.conflict'") == 1)

            let attention = try await CaseStore(pool: fixture.database.pool).attention(now: Date())
            #expect(attention.accountConflicts.map(\.payerUserId) == ["bob"])
            #expect(attention.accountConflicts.first?.otherUserId == "alice")
            #expect(attention.accountConflicts.first?.transactionId == "5005002")
            #expect(!attention.isClear)
        }
    }

    /// The events these outcomes write, as the relay would publish them, against their JSON Schemas.
    @Test func theOrderAndConflictEventsMatchTheirSchemas() async throws {
        try await Fixture.with { fixture in
            let alice = try await fixture.user("alice")
            let bob = try await fixture.user("bob")
            let orderNo = try await order(fixture)
            let purchase = Fact.purchase(original: "5006", transaction: "5006", token: alice, daysAgo: 0.01)
            _ = try await fixture.apply(try await fixture.claim([purchase.refund()]))
            _ = try await fixture.apply(try await fixture.claim([purchase]))
            let paid = Fact.purchase(original: "5007", transaction: "5007", token: alice, daysAgo: 40)
            _ = try await fixture.apply(try await fixture.claim([paid]))
            let resubscribe = Fact.fact("SUBSCRIBED", "RESUBSCRIBE", original: "5007", transaction: "5007002", token: bob, daysAgo: 0.01)
            _ = try await fixture.apply(try await fixture.claim([resubscribe]))
            #expect(try await stored(fixture, orderNo).status == .failed)

            let captured = Captured()
            _ = try await OutboundEventStore(pool: fixture.database.pool).relay(limit: 100) { events in
                captured.set(events.map(\.value))
                return []
            }
            let values = captured.values
            let types = try values.map { value -> String in
                let object = try JSONSerialization.jsonObject(with: Data(value.utf8)) as? [String: Any]
                return object?["type"] as? String ?? "?"
            }
            #expect(types.contains("order.failed") && types.contains("account.conflict"), "\(types)")
            let problems = try OutboundEventsTests.validate(values)
            #expect(problems.isEmpty, "\(problems)")
        }
    }
}

/// The fixture's order was not created.
private struct OrderRefused: Error {
    var outcome: String
}

/// What the relay handed over, kept for the test.
private final class Captured: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [String] = []
    func set(_ values: [String]) { lock.withLock { stored = values } }
    var values: [String] { lock.withLock { stored } }
}
