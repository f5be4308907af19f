import AppStore
import AppStoreTestSupport
import Foundation
import Postgres
import TestSupport
import Testing

/// Order creation, reads, cancel and transaction submissions through the ingress router.
@Suite(.timeLimit(.minutes(3)))
struct OrderRouteTests {
    static let monthly = IngressTestApp.monthly
    static let pro = IngressTestApp.pro

    @Test func createReadCancelWithIdempotencyAndConflicts() async throws {
        try await IngressTestApp.with { harness in
            try await harness.rows.seedTwoPlanCatalogue()

            let unauthenticated = try await harness.post(
                "/api/v1/subscriptions/orders", json: ["productId": Self.monthly, "requestId": "r"])
            #expect(unauthenticated.status == 401)
            #expect(try unauthenticated.json()["code"] as? String == "UNAUTHORIZED")
            let expired = try await harness.post(
                "/api/v1/subscriptions/orders", json: ["productId": Self.monthly, "requestId": "r"],
                headers: ["Authorization": "Bearer \(harness.userToken("alice", expiresIn: -3600))"])
            #expect(expired.status == 401)

            let created = try await harness.createOrder("alice", requestID: "click-1")
            #expect(created.status == 201, "\(created.text)")
            let order = try created.json()
            let orderNo = try #require(order["orderNo"] as? String)
            #expect(order["status"] as? String == "CREATED")
            #expect(order["productId"] as? String == Self.monthly)
            let token = try #require(order["appAccountToken"] as? String)
            #expect(UUID(uuidString: token) != nil)
            for key in ["transactionId", "originalTransactionId", "environment", "failureCode"] {
                #expect(order[key] is NSNull, "\(key): present and null until the order is linked")
            }

            let retried = try await harness.createOrder("alice", requestID: "click-1")
            #expect(retried.status == 200)
            #expect(try retried.json()["orderNo"] as? String == orderNo)
            let reused = try await harness.createOrder("alice", product: Self.pro, requestID: "click-1")
            #expect(try reused.json()["code"] as? String == "ORDER_CONFLICT")
            let second = try await harness.createOrder("alice", requestID: "click-2")
            #expect(second.status == 409, "one open initial order per user and group")
            #expect(try second.json()["code"] as? String == "ORDER_CONFLICT")
            let unknown = try await harness.createOrder("alice", product: "com.example.nope")
            #expect(try unknown.json()["code"] as? String == "PRODUCT_UNAVAILABLE")

            // An Idempotency-Key header with another value than requestId: requestId is the key.
            let keyed = try await harness.post(
                "/api/v1/subscriptions/orders", json: ["productId": Self.monthly, "requestId": "click-9"],
                headers: ["Authorization": "Bearer \(harness.userToken("erin"))", "Idempotency-Key": "attempt-1"])
            #expect(keyed.status == 201, "\(keyed.text)")
            let rekeyed = try await harness.post(
                "/api/v1/subscriptions/orders", json: ["productId": Self.monthly, "requestId": "click-9"],
                headers: ["Authorization": "Bearer \(harness.userToken("erin"))", "Idempotency-Key": "attempt-2"])
            #expect(rekeyed.status == 200, "\(rekeyed.text)")
            #expect(try rekeyed.json()["orderNo"] as? String == (try keyed.json()["orderNo"] as? String))
            // The header alone is the key when the body has no requestId.
            let headerOnly = try await harness.post(
                "/api/v1/subscriptions/orders", json: ["productId": Self.monthly],
                headers: ["Authorization": "Bearer \(harness.userToken("frank"))", "Idempotency-Key": "click-h"])
            #expect(headerOnly.status == 201, "\(headerOnly.text)")
            let headerAgain = try await harness.post(
                "/api/v1/subscriptions/orders", json: ["productId": Self.monthly, "requestId": "click-h"],
                headers: ["Authorization": "Bearer \(harness.userToken("frank"))"])
            #expect(headerAgain.status == 200, "\(headerAgain.text)")

            let bob = try await harness.createOrder("bob")
            #expect(bob.status == 201)
            let bobToken = try bob.json()["appAccountToken"] as? String
            #expect(bobToken != token, "each user has their own random token")

            let auth = ["Authorization": "Bearer \(harness.userToken("alice"))"]
            let read = await harness.get("/api/v1/subscriptions/orders/\(orderNo)", headers: auth)
            #expect(read.status == 200)
            let foreign = await harness.get(
                "/api/v1/subscriptions/orders/\(orderNo)", headers: ["Authorization": "Bearer \(harness.userToken("bob"))"])
            #expect(foreign.status == 404)

            let cancelled = await harness.request("POST", "/api/v1/subscriptions/orders/\(orderNo)/cancel", headers: auth)
            #expect(cancelled.status == 200)
            #expect(try cancelled.json()["status"] as? String == "CANCELLED")
            let again = try await harness.createOrder("alice", requestID: "click-3")
            #expect(again.status == 201, "a cancelled order no longer blocks a new purchase")
            #expect(
                try await harness.count(
                    "SELECT count(*) FROM status_history WHERE entity_type = 'ORDER' AND current_status = 'CANCELLED'") == 1)

            // StoreKit's `.pending` reported: the order waits, a repeat answers it unchanged, a cancelled
            // order cannot become pending, and only its owner can report it.
            let waitingNo = try #require(try again.json()["orderNo"] as? String)
            let pendingPath = "/api/v1/subscriptions/orders/\(waitingNo)/pending"
            #expect(await harness.request("POST", pendingPath, headers: ["Authorization": "Bearer \(harness.userToken("bob"))"]).status == 404)
            for _ in 0..<2 {
                let pending = await harness.request("POST", pendingPath, headers: auth)
                #expect(pending.status == 200, "\(pending.text)")
                #expect(try pending.json()["status"] as? String == "PENDING")
            }
            #expect(
                try await harness.count(
                    "SELECT count(*) FROM status_history WHERE entity_key = '\(waitingNo)' AND current_status = 'PENDING' AND cause = 'client.pending'"
                )
                    == 1)
            let blocked = try await harness.createOrder("alice", requestID: "click-4")
            #expect(blocked.status == 409)
            #expect(try blocked.json()["code"] as? String == "PURCHASE_PENDING")
            let late = await harness.request("POST", "/api/v1/subscriptions/orders/\(orderNo)/pending", headers: auth)
            #expect(late.status == 409)
            #expect(try late.json()["code"] as? String == "ORDER_CONFLICT")
        }
    }

    /// domain.md: older open orders are EXPIRED after a configurable time (`INGRESS_OPEN_ORDER_MINUTES`).
    @Test func aNewPurchaseSupersedesAnOpenOrderOlderThanTheConfiguredWindow() async throws {
        try await IngressTestApp.with(extra: ["INGRESS_OPEN_ORDER_MINUTES": "0"]) { harness in
            try await harness.rows.seedTwoPlanCatalogue()
            let first = try await harness.createOrder("gina", requestID: "click-1")
            #expect(first.status == 201, "\(first.text)")
            let firstNo = try #require(try first.json()["orderNo"] as? String)
            let second = try await harness.createOrder("gina", requestID: "click-2")
            #expect(second.status == 201, "\(second.text)")
            let read = await harness.get("/api/v1/subscriptions/orders/\(firstNo)", headers: harness.authorized("gina"))
            #expect(try read.json()["status"] as? String == "EXPIRED")
        }
    }

    @Test func submissionsAreVerifiedStoredOnceAndAnsweredPendingWithoutAWorker() async throws {
        try await IngressTestApp.with(extra: ["INGRESS_FULFILLMENT_WAIT_MS": "300"]) { harness in
            try await harness.rows.seedTwoPlanCatalogue()
            let order = try await harness.createOrder("carol").json()
            let orderNo = try #require(order["orderNo"] as? String)
            let token = UUID(uuidString: try #require(order["appAccountToken"] as? String))
            let auth = ["Authorization": "Bearer \(harness.userToken("carol"))"]
            let path = "/api/v1/subscriptions/orders/\(orderNo)/apple-transaction"

            let transaction = TestPayloads.transaction(
                bundleId: IngressTestApp.bundleID, environment: .sandbox, productId: Self.monthly, appAccountToken: token)
            let jws = try harness.signer.sign(transaction)
            for _ in 0..<3 {
                let response = try await harness.post(path, json: ["signedTransaction": jws], headers: auth)
                #expect(response.status == 202, "\(response.text)")
                let pending = try response.json()
                #expect(pending["code"] as? String == "FULFILLMENT_PENDING")
                // Readable as a result too: the order is not FULFILLED yet.
                #expect(pending["orderNo"] as? String == orderNo)
                #expect(pending["orderStatus"] as? String == "CREATED")
                #expect(pending["transactionId"] as? String == transaction.transactionId)
                #expect(pending["fulfilled"] as? Bool == false)
            }
            #expect(try await harness.count("SELECT count(*) FROM inbound_event WHERE kind = 'submission'") == 1)

            let wrongProduct = try harness.signer.sign(
                TestPayloads.transaction(
                    bundleId: IngressTestApp.bundleID, environment: .sandbox, productId: Self.pro, appAccountToken: token))
            let mismatch = try await harness.post(path, json: ["signedTransaction": wrongProduct], headers: auth)
            #expect(try mismatch.json()["code"] as? String == "TRANSACTION_INVALID")
            // The user's own purchase of another product can never complete the order: it ends FAILED.
            let failed = try (await harness.get("/api/v1/subscriptions/orders/\(orderNo)", headers: auth)).json()
            #expect(failed["status"] as? String == "FAILED")
            #expect(failed["failureCode"] as? String == "ORDER_PRODUCT_MISMATCH")
            #expect(try await harness.count("SELECT count(*) FROM outbound_event WHERE type = 'order.failed'") == 1)
            let forged = try TestAppleSigner().sign(transaction)
            let refused = try await harness.post(path, json: ["signedTransaction": forged], headers: auth)
            #expect(refused.status == 422)
            #expect(try refused.json()["code"] as? String == "TRANSACTION_INVALID")

            // Someone else's purchase (their appAccountToken) uploaded by carol.
            let dave = try await harness.createOrder("dave").json()
            let daveToken = UUID(uuidString: try #require(dave["appAccountToken"] as? String))
            let davesTransaction = try harness.signer.sign(
                TestPayloads.transaction(
                    bundleId: IngressTestApp.bundleID, environment: .sandbox, productId: Self.monthly, appAccountToken: daveToken))
            let conflict = try await harness.post(
                "/api/v1/subscriptions/apple-transactions/observed", json: ["signedTransaction": davesTransaction], headers: auth)
            #expect(conflict.status == 409)
            #expect(try conflict.json()["code"] as? String == "ACCOUNT_CONFLICT")
            let expired = try harness.signer.sign(
                TestPayloads.transaction(
                    bundleId: IngressTestApp.bundleID, environment: .sandbox, productId: Self.monthly,
                    purchaseDate: Date() - 40 * 86_400, appAccountToken: token))
            let stale = try await harness.post(path, json: ["signedTransaction": expired], headers: auth)
            #expect(try stale.json()["code"] as? String == "TRANSACTION_EXPIRED")
            #expect(harness.leakedSecrets().isEmpty, "the ingress log leaks \(harness.leakedSecrets())")
        }
    }
}
