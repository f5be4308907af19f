import Foundation
import HTTPServer
import Postgres
import ServiceRuntime
import Testing

@testable import IngressApp

/// What the router answers before any handler: unknown paths, wrong methods, trace ids; and the
/// one mapping of database errors.
@Suite(.timeLimit(.minutes(3)))
struct RoutingTests {
    @Test func unknownPathsAre404EvenUnderTheAuthenticatedPrefix() async throws {
        try await IngressTestApp.with { app in
            for path in ["/", "/api", "/api/v1", "/api/v1/nothing", "/api/v1/subscriptions/orders/PAY1/refund", "/api/v2/credits/balance"] {
                let response = await app.get(path)
                #expect(response.status == 404, "\(path)")
                #expect(response.code == "NOT_FOUND", "\(path)")
            }
        }
    }

    @Test func wrongMethodsAre405WithAllow() async throws {
        try await IngressTestApp.with { app in
            let cases: [(String, String, String)] = [
                ("DELETE", "/api/v1/subscriptions/current", "GET"), ("PUT", "/api/v1/credits/usage", "POST"),
                ("GET", "/api/v1/subscriptions/orders", "POST"), ("POST", "/api/v1/subscriptions/consumption-consent", "GET, PUT"),
                ("GET", "/api/v1/iap/apple/notifications/sandbox", "POST"), ("POST", "/healthz", "GET"),
            ]
            for (method, path, allow) in cases {
                // No credentials: routing answers before any authentication.
                let response = await app.request(method, path)
                #expect(response.status == 405, "\(method) \(path)")
                #expect(response.code == "METHOD_NOT_ALLOWED", "\(method) \(path)")
                #expect(response.header("allow") == allow, "\(method) \(path)")
            }
        }
    }

    @Test func theClientsRequestIdIsTheTraceIdOfErrors() async throws {
        try await IngressTestApp.with { app in
            let traced = await app.get("/api/v1/credits/balance", headers: ["X-Request-Id": "client-trace-1"])
            #expect(try traced.json()["traceId"] as? String == "client-trace-1")
            let replaced = await app.get("/api/v1/credits/balance", headers: ["X-Request-Id": "not a sane id"])
            let generated = try #require(try replaced.json()["traceId"] as? String)
            #expect(generated.count == 32 && generated.allSatisfy(\.isHexDigit))
        }
    }

    @Test func theRegisteredRoutesAreTheDocumentedOnes() async throws {
        try await IngressTestApp.with { app in
            let routes = Set(app.router.registeredRoutes.map { "\($0.method) \($0.pattern)" })
            // /metrics is served on the internal listener only.
            #expect(routes.count == 28)
            #expect(routes.contains("POST /api/v1/iap/apple/retention/production"))
            #expect(routes.contains("POST /api/v1/iap/apple/retention/sandbox"))
            #expect(routes.contains("POST /api/v1/subscriptions/offers/signature"))
            #expect(!routes.contains("GET /metrics"))
            #expect(routes.contains("POST /api/v1/subscriptions/import"))
            #expect(routes.contains("GET /api/v1/subscriptions/import/{importId}"))
            #expect(routes.contains("POST /api/v1/subscriptions/orders/{orderNo}/apple-transaction"))
            #expect(routes.contains("POST /api/v1/credits/usage"))
            #expect(routes.contains("POST /api/v1/iap/apple/notifications/production"))
        }
    }

    /// The middleware on its own: a router whose handler fails as the database would.
    func answer(to error: any Error) async -> HTTPResponse {
        var router = Router(context: IngressRequestContext.self, logger: Logger(label: "test", level: .critical, sink: .memory()))
        router.add(middleware: DatabaseErrors())
        router.get("/fail") { _ in throw error }
        return await router.handle(HTTPRequest(head: HTTPRequestHead(method: "GET", path: "/fail", traceID: "t")))
    }

    @Test func retryableDatabaseErrorsAre503() async throws {
        for error in [
            PostgresError.connectionFailed("gone"), .acquireTimeout,
            .server(sqlState: "40001", message: "serialization", constraint: nil),
            .server(sqlState: "40P01", message: "deadlock", constraint: nil),
        ] {
            let response = await answer(to: error)
            #expect(response.status == 503, "\(error)")
            #expect(
                String(decoding: response.body, as: UTF8.self)
                    == #"{"code":"SERVICE_UNAVAILABLE","message":"a dependency is unavailable; retry later","traceId":"t"}"#)
        }
    }

    @Test func valuesTheDatabaseCannotHoldAre400AndOtherErrors500() async throws {
        let invalid = await answer(to: PostgresError.server(sqlState: "22021", message: "invalid byte sequence", constraint: nil))
        #expect(invalid.status == 400)
        #expect(
            String(decoding: invalid.body, as: UTF8.self)
                == #"{"code":"INVALID_REQUEST","message":"a value in the request is not acceptable","traceId":"t"}"#)
        let violated = await answer(to: PostgresError.uniqueViolation(constraint: "k", detail: "Key (x)=(secret)"))
        #expect(violated.status == 500)
        #expect(!String(decoding: violated.body, as: UTF8.self).contains("secret"))
        // A business error passes through the middleware untouched.
        let business = await answer(to: APIError.orderConflict("no"))
        #expect(business.status == 409)
    }

    @Test func aNulCharacterInAPathParameterIsNeverA500() async throws {
        try await IngressTestApp.with { app in
            let response = await app.get("/api/v1/subscriptions/orders/PAY%00x", headers: app.authorized("alice"))
            #expect([400, 404].contains(response.status), "\(response.status) \(response.text)")
        }
    }
}
