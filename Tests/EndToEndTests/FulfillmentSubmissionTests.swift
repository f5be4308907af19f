import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import Pipeline
import Postgres
import ServiceRuntime
import Storage
import TestSupport
import Testing

/// Client uploads and observations through the pair, alone and racing Apple's notifications; account
/// conflicts the worker catches itself.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct FulfillmentSubmissionTests {
    static func id() -> String { String(UInt64.random(in: 2_000_000_000_000_000...2_999_999_999_999_999)) }

    /// Scenarios 1, 2, 3, 5, 7, 8 and 19: upload, cancel, Ask to Buy, repeated and old uploads, restore.
    @Test func uploadsObservationsCancelAndAskToBuy() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }

        // 1: order, StoreKit success, upload: FULFILLED, ACTIVE, 1000 credits in the answer.
        let (orderNo, token) = try await harness.order("alice")
        let id = Self.id()
        let jws = try harness.signer.sign(harness.transaction(id, token: token))
        let first = try await harness.submit(jws, orderNo: orderNo, as: "alice")
        #expect(first.status == 200, "\(first.text)")
        let body = try first.json()
        #expect(body["orderNo"] as? String == orderNo)
        #expect(body["orderStatus"] as? String == "FULFILLED")
        #expect(body["subscriptionStatus"] as? String == "ACTIVE")
        #expect(body["activeProductId"] as? String == WorkerHarness.starter)
        #expect(body["creditsBalance"] as? Int == 1000)
        #expect(body["transactionId"] as? String == id)
        #expect(body["expiresAt"] is String)
        #expect(body["fulfilled"] as? Bool == true)
        #expect(try await harness.submissionOutcome(of: id) == .succeeded)

        // 5 and 7: the same JWS again, and a fresh signature of the same transaction: same answer.
        for upload in [jws, try harness.signer.sign(harness.transaction(id, token: token))] {
            let again = try await harness.submit(upload, orderNo: orderNo, as: "alice")
            #expect(again.status == 200)
            #expect(try again.json()["creditsBalance"] as? Int == 1000)
        }
        // 19: a new device restores it (observed): the existing result.
        let restored = try await harness.submit(jws, orderNo: nil, as: "alice")
        #expect(restored.status == 200)
        #expect(try restored.json()["orderNo"] as? String == orderNo)
        // 8: the old JWS on a new order is refused; nothing is granted twice.
        let (upgradeOrder, _) = try await harness.order("alice", product: WorkerHarness.pro)
        let old = try await harness.submit(jws, orderNo: upgradeOrder, as: "alice")
        #expect(old.status == 422, "\(old.text)")
        #expect(try await harness.count("SELECT count(*) FROM credit_grant") == 1)
        #expect(try await harness.balance("alice") == 1000)

        // 2: the user cancels in the payment sheet: nothing granted. A real charge reported later
        // for that order reopens it.
        let (cancelled, carolToken) = try await harness.order("carol")
        let cancel = try await harness.client.request(
            "POST", "/api/v1/subscriptions/orders/\(cancelled)/cancel",
            headers: ["Authorization": "Bearer \(harness.ingress.userToken("carol"))"])
        #expect(cancel.status == 200)
        #expect(try await harness.balance("carol") == 0)
        let charged = Self.id()
        let late = try await harness.submit(
            try harness.signer.sign(harness.transaction(charged, token: carolToken)), orderNo: cancelled, as: "carol")
        #expect(late.status == 200, "\(late.text)")
        #expect(
            try await harness.value(
                "SELECT string_agg(coalesce(previous_status, '-') || '>' || current_status, ',' ORDER BY id) FROM status_history WHERE entity_key = \(cancelled)",
                as: String.self) == "->CREATED,CREATED>CANCELLED,CANCELLED>VERIFIED,VERIFIED>FULFILLED")
        #expect(try await harness.balance("carol") == 1000)

        // 3: Ask to Buy: the order waits (PENDING); the approved purchase is observed by the app and
        // notified by Apple; the order completes once, granted once.
        let (pending, bobToken) = try await harness.order("bob")
        let bob = ["Authorization": "Bearer \(harness.ingress.userToken("bob"))"]
        let reported = try await harness.client.request("POST", "/api/v1/subscriptions/orders/\(pending)/pending", headers: bob)
        #expect(reported.status == 200, "\(reported.text)")
        #expect(try reported.json()["status"] as? String == "PENDING")
        // The client must not buy again while Apple waits for the approval.
        let again = try await harness.client.post(
            "/api/v1/subscriptions/orders", json: ["productId": WorkerHarness.starter, "requestId": UUID().uuidString], headers: bob)
        #expect(again.status == 409, "\(again.text)")
        #expect(try again.json()["code"] as? String == "PURCHASE_PENDING")
        let approved = harness.transaction(Self.id(), token: bobToken)
        let observed = try await harness.submit(try harness.signer.sign(approved), orderNo: nil, as: "bob")
        #expect(observed.status == 200, "\(observed.text)")
        #expect(try observed.json()["orderNo"] as? String == pending)
        let notified = try await harness.notify(.subscribed, .initialBuy, transaction: approved)
        #expect(try await harness.outcome(of: notified) == .succeeded)
        #expect(try await harness.value("SELECT status FROM payment_order WHERE order_no = \(pending)", as: String.self) == "FULFILLED")
        #expect(try await harness.balance("bob") == 1000)
        #expect(try await harness.count("SELECT count(*) FROM payment_order WHERE user_id = 'bob'") == 1)
        try await harness.checkInvariants()
    }

    /// Scenario 6 and the issue's concurrency test: the client's uploads and Apple's notifications of
    /// one purchase, a hundred times at once, across two workers: one transaction row, one order
    /// FULFILLED, one grant.
    @Test func uploadsAndNotificationsOfOnePurchaseRacingAHundredTimes() async throws {
        let harness = try await WorkerHarness.start(workers: 2)
        defer { harness.stop() }
        let (orderNo, token) = try await harness.order("alice")
        let id = Self.id()
        let purchase = harness.transaction(id, token: token)
        let sameNotification = try harness.signer.signNotification(
            type: .subscribed, subtype: .initialBuy, bundleId: IngressHarness.bundleID, environment: .sandbox,
            transaction: purchase)
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for i in 0..<100 {
                group.addTask {
                    switch i % 3 {
                    case 0:  // the very same notification, redelivered
                        return try await harness.client.post(
                            "/api/v1/iap/apple/notifications/sandbox", json: ["signedPayload": sameNotification]
                        ).status
                    case 1:  // another notification of the same transaction
                        _ = try await harness.notify(.subscribed, .initialBuy, transaction: purchase)
                        return 200
                    default:  // the app uploading (each signature differs, so each is a new submission)
                        return try await harness.submit(try harness.signer.sign(purchase), orderNo: orderNo, as: "alice").status
                    }
                }
            }
            var statuses: [Int] = []
            for try await status in group { statuses.append(status) }
            return statuses
        }
        #expect(statuses.allSatisfy { $0 == 200 || $0 == 202 }, "\(statuses)")
        let settled = try await eventually(timeout: 60) {
            try await harness.count(
                """
                SELECT (SELECT count(*) FROM inbound_event WHERE kind = 'notification' AND process_status NOT IN ('SUCCEEDED', 'DEAD'))
                     + (SELECT count(*) FROM inbound_event WHERE kind = 'submission' AND process_status NOT IN ('SUCCEEDED', 'DEAD'))
                """) == 0
        }
        #expect(settled)
        #expect(try await harness.count("SELECT count(*) FROM inbound_event WHERE kind = 'notification'") == 34, "1 redelivered + 33 distinct")
        #expect(try await harness.count("SELECT count(*) FROM inbound_event WHERE kind = 'submission'") >= 1)
        #expect(try await harness.count("SELECT count(*) FROM apple_transaction") == 1)
        #expect(try await harness.count("SELECT count(*) FROM payment_order WHERE status = 'FULFILLED'") == 1)
        #expect(try await harness.value("SELECT status FROM payment_order WHERE order_no = \(orderNo)", as: String.self) == "FULFILLED")
        #expect(try await harness.count("SELECT count(*) FROM credit_grant") == 1)
        #expect(try await harness.balance("alice") == 1000)
        #expect(
            try await harness.count(
                "SELECT count(*) FROM inbound_event WHERE kind = 'notification' AND notification_uuid IS NOT NULL AND process_status = 'DEAD'") == 0)
        #expect(try await harness.count("SELECT count(*) FROM inbound_event WHERE kind = 'submission' AND process_status = 'DEAD'") == 0)
        try await harness.checkInvariants()
    }

    /// Scenario 20 as the worker sees it: a chain attributed to one user that another user's token
    /// or login claims is frozen, nothing moves, and it stays frozen for later facts.
    @Test func accountConflictsFreezeTheChain() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        let alice = try await harness.user("alice")
        let bob = try await harness.user("bob")
        let now = Date()
        let id = Self.id()
        let purchase = harness.transaction(id, purchase: now - 3600, token: alice, signed: now - 3600)
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)

        // Bob, logged in, observes Alice's purchase (an account switch on a shared device): he is
        // told it is another account's at once; it is kept and applied to Alice (nothing new).
        let refused = try await harness.submit(try harness.signer.sign(purchase), orderNo: nil, as: "bob")
        #expect(refused.status == 409)
        #expect(try refused.json()["code"] as? String == "ACCOUNT_CONFLICT")
        #expect(try refused.json().keys.sorted() == ["code", "message", "traceId"], "nothing about the owner")
        #expect(try await harness.submissionOutcome(of: id) == .succeeded)
        #expect(try await harness.subscription(id)?.frozenReason == nil)

        // Bob's upload of it for an order of his that got past that check (a race): the worker
        // refuses it and freezes the chain.
        let jws = try harness.signer.sign(purchase)
        let hash = SHA256.hash(Array(jws.utf8)).map { String(format: "%02x", $0) }.joined()
        let cipher = try #require(PayloadCipher(reader: ConfigurationReader(environment: harness.ingress.pipeline.appleSettings)))
        let sealed = try cipher.seal(Array(jws.utf8), context: "submission:" + hash)
        let store = EventStore(pool: harness.pool, topic: harness.ingress.pipeline.topic)
        _ = try await store.insertSubmission(
            NewSubmission(
                kind: "CLIENT", userID: "bob", orderNo: "bobs-order", environment: "Sandbox", transactionID: id,
                originalTransactionID: id, payloadHash: hash, sealedPayload: sealed.sealed, payloadKeyID: sealed.keyID,
                traceID: nil),
            publishGrace: .zero)
        #expect(try await harness.submissionOutcome(of: id) == .dead("ACCOUNT_CONFLICT"))
        #expect(try await harness.subscription(id)?.frozenReason == "ACCOUNT_CONFLICT")
        #expect(try await harness.metric("subs_fulfillment_account_conflicts_total", reaching: 1) == 1)

        // A renewal of the frozen chain: nothing moves until an operator clears it.
        let renewal = harness.transaction(Self.id(), original: id, purchase: now, token: alice, reason: .renewal)
        #expect(try await harness.outcome(of: try await harness.notify(.didRenew, transaction: renewal)) == .dead("CHAIN_FROZEN"))
        // A fact of the chain carrying Bob's token: another conflict.
        let foreign = harness.transaction(Self.id(), original: id, purchase: now, token: bob, reason: .renewal)
        #expect(try await harness.outcome(of: try await harness.notify(.didRenew, transaction: foreign)) == .dead("ACCOUNT_CONFLICT"))
        #expect(try await harness.count("SELECT count(*) FROM apple_transaction") == 1)
        #expect(try await harness.balance("alice") == 1000)
        #expect(try await harness.balance("bob") == 0)
        #expect(try await harness.subscription(id)?.status == "ACTIVE")

        // The operator resolves it in Alice's favour (`subsctl chain unfreeze`): Apple's two
        // refused renewals are replayed and are hers, Bob's upload for his order stays refused.
        let bindings = ChainBindingStore(pool: harness.pool, topic: harness.ingress.pipeline.topic)
        await #expect(throws: ChainActionRefusal.self) {
            try await bindings.unfreeze(
                environment: nil, originalTransactionID: "no-such-chain", ownerUserID: "alice", operator: "ops", reason: "typo")
        }
        let resolved = try await bindings.unfreeze(
            environment: nil, originalTransactionID: id, ownerUserID: "alice", operator: "ops", reason: "ticket 42")
        #expect(resolved.replayedEvents == 2)
        #expect(resolved.binding.source == .resolution)
        #expect(resolved.binding.appleTokenStatus == .pending)
        let replayed = try await eventually(timeout: 30) {
            try await harness.count(
                """
                SELECT count(*) FROM inbound_event WHERE kind = 'notification' AND process_status = 'SUCCEEDED'
                   AND transaction_id IN (\(renewal.transactionId!), \(foreign.transactionId!))
                """) == 2
        }
        #expect(replayed)
        #expect(try await harness.subscription(id)?.frozenReason == nil)
        #expect(try await harness.submissionOutcome(of: id) == .dead("ACCOUNT_CONFLICT"))
        #expect(try await harness.balance("alice") == 3000)
        #expect(try await harness.balance("bob") == 0)
        #expect(try await harness.count("SELECT count(*) FROM audit_log WHERE action = 'CHAIN_UNFROZEN' AND operator = 'ops'") == 1)
        // A second resolution finds nothing frozen.
        await #expect(throws: ChainActionRefusal.self) {
            try await bindings.unfreeze(
                environment: nil, originalTransactionID: id, ownerUserID: "alice", operator: "ops", reason: "again")
        }
        try await harness.checkInvariants()
    }
}
