import Foundation
import HTTPServer
import TestSupport
import Testing

@testable import IngressApp

/// Every JSON answer, success or error, public or admin, tells browsers and proxies not to keep it
/// and not to sniff it, once.
@Suite(.timeLimit(.minutes(3)))
struct ResponseHeaderTests {
    static func expectNoStoreNoSniff(_ response: TestResponse, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let fields = response.response.headers
        #expect(response.header("content-type") == "application/json", "\(what)", sourceLocation: sourceLocation)
        #expect(
            fields.filter { $0.0.lowercased() == "cache-control" }.map(\.1) == ["no-store"], "\(what): \(fields)",
            sourceLocation: sourceLocation)
        #expect(
            fields.filter { $0.0.lowercased() == "x-content-type-options" }.map(\.1) == ["nosniff"], "\(what): \(fields)",
            sourceLocation: sourceLocation)
    }

    @Test func successAnswersCarryNoStoreAndNosniff() async throws {
        try await IngressTestApp.with { app in
            try await app.rows.applyDemoCatalogue()
            let order = try await app.createOrder("alice")
            #expect(order.status == 201, "\(order.text)")
            Self.expectNoStoreNoSniff(order, "a new order")
            let balance = await app.get("/api/v1/credits/balance", headers: app.authorized("alice"))
            #expect(balance.status == 200, "\(balance.text)")
            Self.expectNoStoreNoSniff(balance, "the balance")
            let current = await app.get("/api/v1/subscriptions/current", headers: app.authorized("alice"))
            #expect(current.status == 200, "\(current.text)")
            Self.expectNoStoreNoSniff(current, "the current subscriptions")
        }
    }

    @Test func errorAnswersCarryThemToo() async throws {
        try await IngressTestApp.with { app in
            let unauthorized = await app.get("/api/v1/credits/balance")
            #expect(unauthorized.status == 401)
            Self.expectNoStoreNoSniff(unauthorized, "a refused token (middleware)")
            let malformed = try await app.post("/api/v1/subscriptions/orders", json: ["productId": 7], headers: app.authorized("alice"))
            #expect(malformed.status == 400)
            Self.expectNoStoreNoSniff(malformed, "a malformed body (handler)")
            let unknown = await app.get("/api/v1/nothing")
            #expect(unknown.status == 404)
            Self.expectNoStoreNoSniff(unknown, "an unknown path (router)")
        }
    }

    @Test func adminAnswersCarryThem() async throws {
        try await AdminTestApp.with { admin in
            try await admin.app.rows.applyDemoCatalogue()
            let order = try await admin.app.createOrder("carol")
            let orderNo = try #require(try order.json()["orderNo"] as? String)
            let lookup = try await admin.get("/admin/v1/lookup?q=\(orderNo)")
            #expect(lookup.status == 200, "\(lookup.text)")
            Self.expectNoStoreNoSniff(lookup, "the admin lookup")
            let refused = try await admin.request("GET", "/admin/v1/lookup?q=\(orderNo)", token: nil)
            #expect(refused.status == 401)
            Self.expectNoStoreNoSniff(refused, "an admin refusal")
        }
    }

    @Test func otherContentTypesAndOwnCachePoliciesAreLeftAlone() {
        let text = HTTPResponse.text("ok")
        #expect(text.header("cache-control") == nil && text.header("x-content-type-options") == nil)
        let cached = HTTPResponse(
            status: 200, headers: [("content-type", "Application/JSON; charset=utf-8"), ("cache-control", "max-age=60")])
        #expect(cached.headers.filter { $0.0.lowercased() == "cache-control" }.map(\.1) == ["max-age=60"])
        #expect(cached.header("x-content-type-options") == "nosniff")
    }
}
