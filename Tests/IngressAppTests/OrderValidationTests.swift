import AppStore
import AppStoreTestSupport
import Foundation
import Postgres
import TestSupport
import Testing

/// The 4xx answers of the order and submission routes: bodies, identifiers, unknown and foreign
/// orders, and the state machine of the client's reports.
@Suite(.timeLimit(.minutes(3)))
struct OrderValidationTests {
    static let ordersPath = "/api/v1/subscriptions/orders"

    @Test func malformedJSONAndWrongTypesAre400MalformedJSON() async throws {
        try await IngressTestApp.with { app in
            try await app.rows.seedTwoPlanCatalogue()
            var headers = app.authorized("alice")
            headers["Content-Type"] = "application/json"
            for body in ["{not json", "", "[]", #"{"productId":42,"requestId":"r"}"#, #"{"requestId":"r"}"#] {
                let response = await app.request("POST", Self.ordersPath, headers: headers, body: Array(body.utf8))
                #expect(response.status == 400, "\(body)")
                #expect(response.code == "MALFORMED_JSON", "\(body)")
            }
            let missing = await app.request("POST", Self.ordersPath, headers: headers, body: Array(#"{"requestId":"r"}"#.utf8))
            #expect(try missing.json()["message"] as? String == "missing field 'productId'")
            #expect(try await app.count("SELECT count(*) FROM payment_order") == 0)
        }
    }

    @Test func aRequestIdIsRequiredAndBounded() async throws {
        try await IngressTestApp.with { app in
            try await app.rows.seedTwoPlanCatalogue()
            let none = try await app.post(Self.ordersPath, json: ["productId": IngressTestApp.monthly], headers: app.authorized("alice"))
            #expect(none.status == 400)
            #expect(none.code == "INVALID_REQUEST")
            for bad in ["", String(repeating: "r", count: 129), "click\u{0007}", "a\u{200B}b"] {
                let response = try await app.createOrder("alice", requestID: bad)
                #expect(response.status == 400, "\(bad.debugDescription)")
                #expect(response.code == "INVALID_REQUEST", "\(bad.debugDescription)")
            }
            #expect(try await app.createOrder("alice", requestID: String(repeating: "r", count: 128)).status == 201)
        }
    }

    @Test func aProductIdIsBoundedAndWithoutControlCharacters() async throws {
        try await IngressTestApp.with { app in
            for bad in ["", String(repeating: "p", count: 256), "com.example\u{0000}", "line\nbreak"] {
                let response = try await app.createOrder("alice", product: bad)
                #expect(response.status == 400, "\(bad.debugDescription)")
                #expect(response.code == "INVALID_REQUEST", "\(bad.debugDescription)")
            }
        }
    }

    @Test func productsNotOnSaleHereAreUnavailable() async throws {
        try await IngressTestApp.with { app in
            try await app.rows.seedTwoPlanCatalogue()
            try await app.pool.query(
                """
                INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount, enabled)
                VALUES (\(IngressTestApp.bundleID), 'com.example.withdrawn', 'group-1', 'old', 3, 'P1M', 100, false),
                       ('com.other.app', 'com.other.monthly', 'group-9', 'other', 1, 'P1M', 100, true)
                """)
            for product in ["com.example.withdrawn", "com.other.monthly", "com.example.nope"] {
                let response = try await app.createOrder("alice", product: product)
                #expect(response.status == 422, "\(product)")
                #expect(response.code == "PRODUCT_UNAVAILABLE", "\(product)")
            }
            // Refused before anything is written: not even the user.
            #expect(try await app.count("SELECT count(*) FROM app_user") == 0)
        }
    }

    @Test func creationRecordsHistoryAndOneAccountTokenPerUser() async throws {
        try await IngressTestApp.with { app in
            try await app.rows.seedTwoPlanCatalogue()
            let first = try await app.createOrder("alice", requestID: "one").json()
            let orderNo = try #require(first["orderNo"] as? String)
            #expect(orderNo.hasPrefix("PAY") && orderNo.count == 25)
            #expect(first["orderType"] as? String == "INITIAL")
            #expect(
                try await app.count(
                    "SELECT count(*) FROM status_history WHERE entity_type = 'ORDER' AND entity_key = '\(orderNo)' AND previous_status IS NULL AND current_status = 'CREATED' AND cause = 'client.create'"
                ) == 1)
            _ = await app.request("POST", "\(Self.ordersPath)/\(orderNo)/cancel", headers: app.authorized("alice"))
            let second = try await app.createOrder("alice", requestID: "two").json()
            #expect(second["appAccountToken"] as? String == first["appAccountToken"] as? String, "one token per user")
            #expect(try await app.count("SELECT count(*) FROM user_account_token") == 1)
        }
    }

    @Test func aSubscriberCannotBuyTheSamePlanAndChangesToAnother() async throws {
        try await IngressTestApp.with { app in
            try await app.rows.seedTwoPlanCatalogue()
            try await app.rows.addSubscription(
                user: "sam", product: IngressTestApp.monthly, status: "ACTIVE", expiresAt: wholeSeconds(86_400), group: "group-1")
            let same = try await app.createOrder("sam")
            #expect(same.status == 409)
            #expect(same.code == "ORDER_CONFLICT")
            #expect(try same.json()["message"] as? String == "the user already has this subscription")
            let change = try await app.createOrder("sam", product: IngressTestApp.pro)
            #expect(change.status == 201, "\(change.text)")
            #expect(try change.json()["orderType"] as? String == "CHANGE")
            // A family-shared or lapsed plan is not the user's own current one.
            try await app.rows.addSubscription(
                user: "fay", product: IngressTestApp.monthly, status: "ACTIVE", expiresAt: wholeSeconds(86_400), familyShared: true,
                group: "group-1")
            try await app.rows.addSubscription(
                user: "lee", product: IngressTestApp.monthly, status: "ACTIVE", expiresAt: wholeSeconds(-60), group: "group-1")
            for user in ["fay", "lee"] {
                let response = try await app.createOrder(user)
                #expect(response.status == 201, "\(user): \(response.text)")
                #expect(try response.json()["orderType"] as? String == "INITIAL", "\(user)")
            }
        }
    }

    /// A downgrade is applied by Apple at the next renewal: no order is opened for it, and the
    /// group stays free for an upgrade right after.
    @Test func aDeferredChangeOpensNoOrderAndHoldsNothing() async throws {
        try await IngressTestApp.with { app in
            try await app.rows.seedTwoPlanCatalogue()
            try await app.rows.addSubscription(
                user: "dee", product: IngressTestApp.pro, status: "ACTIVE", expiresAt: wholeSeconds(86_400), group: "group-1")
            let downgrade = try await app.createOrder("dee", product: IngressTestApp.monthly)
            #expect(downgrade.status == 409, "\(downgrade.text)")
            #expect(downgrade.code == "CHANGE_DEFERRED")
            #expect(try await app.count("SELECT count(*) FROM payment_order WHERE user_id = 'dee'") == 0)
            // Asked again, the same answer: nothing was opened that could block it.
            #expect(try await app.createOrder("dee", product: IngressTestApp.monthly).code == "CHANGE_DEFERRED")
            // The other way round is an upgrade, at once: a CHANGE order.
            try await app.rows.addSubscription(
                user: "uma", product: IngressTestApp.monthly, status: "ACTIVE", expiresAt: wholeSeconds(86_400), group: "group-1")
            let upgrade = try await app.createOrder("uma", product: IngressTestApp.pro)
            #expect(upgrade.status == 201, "\(upgrade.text)")
            #expect(try upgrade.json()["orderType"] as? String == "CHANGE")
        }
    }

    @Test func unknownOrdersAre404OnEveryOrderRoute() async throws {
        try await IngressTestApp.with { app in
            try await app.rows.seedTwoPlanCatalogue()
            for orderNo in ["PAY00000000000000000000000", "nope", "%20", "a%2Fb"] {
                for (method, suffix) in [("GET", ""), ("POST", "/cancel"), ("POST", "/pending")] {
                    let response = await app.request(method, "\(Self.ordersPath)/\(orderNo)\(suffix)", headers: app.authorized("alice"))
                    #expect(response.status == 404, "\(method) \(orderNo)\(suffix)")
                    #expect(response.code == "NOT_FOUND")
                    #expect(try response.json()["message"] as? String == "no such order")
                }
            }
        }
    }

    @Test func anotherUsersOrderIsNeitherReadNorMoved() async throws {
        try await IngressTestApp.with { app in
            try await app.rows.seedTwoPlanCatalogue()
            let orderNo = try #require(try await app.createOrder("alice").json()["orderNo"] as? String)
            for (method, suffix) in [("GET", ""), ("POST", "/cancel"), ("POST", "/pending")] {
                let response = await app.request(method, "\(Self.ordersPath)/\(orderNo)\(suffix)", headers: app.authorized("mallory"))
                #expect(response.status == 404, "\(method) \(suffix)")
            }
            let order = try await app.read("\(Self.ordersPath)/\(orderNo)", as: "alice")
            #expect(order["status"] as? String == "CREATED")
        }
    }

    @Test func reportsFollowTheOrderStateMachine() async throws {
        try await IngressTestApp.with { app in
            try await app.rows.seedTwoPlanCatalogue()
            let orderNo = try #require(try await app.createOrder("alice").json()["orderNo"] as? String)
            let cancel = "\(Self.ordersPath)/\(orderNo)/cancel"
            for _ in 0..<2 {
                let response = await app.request("POST", cancel, headers: app.authorized("alice"))
                #expect(response.status == 200)
                #expect(try response.json()["status"] as? String == "CANCELLED")
            }
            #expect(try await app.count("SELECT count(*) FROM status_history WHERE entity_key = '\(orderNo)'") == 2, "created, cancelled once")
            try await app.pool.query("UPDATE payment_order SET status = 'FULFILLED' WHERE order_no = \(orderNo)")
            for (path, target) in [(cancel, "CANCELLED"), ("\(Self.ordersPath)/\(orderNo)/pending", "PENDING")] {
                let response = await app.request("POST", path, headers: app.authorized("alice"))
                #expect(response.status == 409)
                #expect(response.code == "ORDER_CONFLICT")
                #expect(try response.json()["message"] as? String == "an order in status FULFILLED cannot become \(target)")
            }
        }
    }

    @Test func submissionsRefuseBadBodiesUnknownAndForeignOrders() async throws {
        try await IngressTestApp.with { app in
            try await app.rows.seedTwoPlanCatalogue()
            let order = try await app.createOrder("carol").json()
            let orderNo = try #require(order["orderNo"] as? String)
            let path = "\(Self.ordersPath)/\(orderNo)/apple-transaction"
            var headers = app.authorized("carol")
            headers["Content-Type"] = "application/json"
            let malformed = await app.request("POST", path, headers: headers, body: Array("{}".utf8))
            #expect(malformed.status == 400)
            #expect(malformed.code == "MALFORMED_JSON")
            let garbage = try await app.post(path, json: ["signedTransaction": "not.a.jws"], headers: app.authorized("carol"))
            #expect(garbage.status == 422)
            #expect(garbage.code == "TRANSACTION_INVALID")

            let jws = try app.signer.sign(
                TestPayloads.transaction(
                    bundleId: IngressTestApp.bundleID, environment: .sandbox, productId: IngressTestApp.monthly,
                    appAccountToken: UUID(uuidString: try #require(order["appAccountToken"] as? String))))
            let unknown = try await app.post(
                "\(Self.ordersPath)/PAY-unknown/apple-transaction", json: ["signedTransaction": jws], headers: app.authorized("carol"))
            #expect(unknown.status == 404)
            #expect(unknown.code == "NOT_FOUND")
            let foreign = try await app.post(path, json: ["signedTransaction": jws], headers: app.authorized("mallory"))
            #expect(foreign.status == 404)
            #expect(try await app.count("SELECT count(*) FROM inbound_event WHERE kind = 'submission'") == 0)
            #expect(app.leakedSecrets().isEmpty, "\(app.leakedSecrets())")
        }
    }
}
