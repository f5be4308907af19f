import Crypto
import Foundation
import Postgres
import Testing

/// Which credentials open which routes: user tokens the user API, service tokens the metering
/// API, nothing the open routes; every refusal is the same 401 error body.
@Suite(.timeLimit(.minutes(3)))
struct AuthRouteTests {
    /// Every route of the user API, with a body where it takes one.
    static let userRoutes: [(method: String, path: String)] = [
        ("POST", "/api/v1/subscriptions/orders"), ("GET", "/api/v1/subscriptions/orders/PAY1"),
        ("POST", "/api/v1/subscriptions/orders/PAY1/cancel"), ("POST", "/api/v1/subscriptions/orders/PAY1/pending"),
        ("POST", "/api/v1/subscriptions/orders/PAY1/apple-transaction"),
        ("POST", "/api/v1/subscriptions/apple-transactions/observed"), ("GET", "/api/v1/subscriptions/products"),
        ("GET", "/api/v1/subscriptions/current"), ("GET", "/api/v1/subscriptions/consumption-consent"),
        ("PUT", "/api/v1/subscriptions/consumption-consent"), ("GET", "/api/v1/credits/balance"),
        ("GET", "/api/v1/credits/grants"), ("GET", "/api/v1/credits/daily-bills"),
    ]
    static let serviceRoutes: [(method: String, path: String)] = [
        ("POST", "/api/v1/credits/usage"), ("GET", "/api/v1/credits/check?userId=u1&units=1&rate=r"),
    ]

    /// Sends `authorization` (nil: no header) to each route; expects 401 UNAUTHORIZED with the trace id.
    func expectRefused(
        _ app: IngressTestApp, _ routes: [(method: String, path: String)], authorization: String?, _ name: String
    ) async throws {
        for route in routes {
            var headers = ["X-Request-Id": "auth-check", "Content-Type": "application/json"]
            headers["Authorization"] = authorization
            let response = await app.request(route.method, route.path, headers: headers, body: Array("{}".utf8))
            #expect(response.status == 401, "\(route.method) \(route.path) \(name): \(response.text)")
            let body = try response.json()
            #expect(body["code"] as? String == "UNAUTHORIZED", "\(route.path) \(name)")
            #expect(body["message"] is String, "\(route.path) \(name)")
            #expect(body["traceId"] as? String == "auth-check", "\(route.path) \(name)")
            #expect(Set(body.keys) == ["code", "message", "traceId"], "\(route.path) \(name)")
        }
    }

    @Test func everyUserRouteRefusesAMissingToken() async throws {
        try await IngressTestApp.with { app in
            try await expectRefused(app, Self.userRoutes, authorization: nil, "no header")
            try await expectRefused(app, Self.userRoutes, authorization: "Basic dXNlcjpwYXNz", "basic")
            try await expectRefused(app, Self.userRoutes, authorization: "Bearer", "scheme only")
            try await expectRefused(app, Self.userRoutes, authorization: "Bearer    ", "blank token")
        }
    }

    @Test func everyUserRouteRefusesAnExpiredToken() async throws {
        try await IngressTestApp.with { app in
            // Beyond the minute of clock skew allowed.
            try await expectRefused(app, Self.userRoutes, authorization: "Bearer \(app.userToken("u1", expiresIn: -120))", "expired")
        }
    }

    @Test func everyUserRouteRefusesGarbageTokens() async throws {
        try await IngressTestApp.with { app in
            let valid = app.userToken("u1")
            let garbage = [
                "not-a-token", "a.b", "a.b.c.d", "...", "%%%.%%%.%%%", String(valid.dropLast(3)),
                String(repeating: "A", count: 9000), valid + ".extra",
            ]
            for (index, token) in garbage.enumerated() {
                try await expectRefused(app, Self.userRoutes, authorization: "Bearer \(token)", "garbage \(index)")
            }
        }
    }

    @Test func everyUserRouteRefusesATokenSignedWithAnotherSecret() async throws {
        try await IngressTestApp.with { app in
            let header = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8))
            let payload = Base64URL.encode(Array(#"{"sub":"u1","exp":\#(Int(Date().timeIntervalSince1970) + 3600)}"#.utf8))
            let signature = HMACSHA256.authenticate(key: SecureRandom.bytes(32), message: Array("\(header).\(payload)".utf8))
            try await expectRefused(
                app, Self.userRoutes, authorization: "Bearer \(header).\(payload).\(Base64URL.encode(signature))", "foreign")
        }
    }

    @Test func tokensWithoutSubjectExpiryOrAlreadyValidAreRefused() async throws {
        try await IngressTestApp.with { app in
            let header = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8))
            let later = Int(Date().timeIntervalSince1970) + 3600
            let claims = [
                ("no sub", #"{"exp":\#(later)}"#), ("empty sub", #"{"sub":"","exp":\#(later)}"#),
                ("no exp", #"{"sub":"u1"}"#), ("not yet valid", #"{"sub":"u1","exp":\#(later),"nbf":\#(later - 60)}"#),
                ("sub not a string", #"{"sub":42,"exp":\#(later)}"#), ("not an object", "[1,2]"),
                ("nbf not a number", #"{"sub":"u1","exp":\#(later),"nbf":"soon"}"#),
                ("exp not a number", #"{"sub":"u1","exp":"\#(later)"}"#),
                ("duplicate sub", #"{"sub":"u1","exp":\#(later),"sub":"u2"}"#),
                ("duplicate exp", #"{"sub":"u1","exp":1,"exp":\#(later)}"#),
            ]
            for (name, claim) in claims {
                let token = app.signedToken(header: header, payload: Base64URL.encode(Array(claim.utf8)))
                try await expectRefused(app, [("GET", "/api/v1/credits/balance")], authorization: "Bearer \(token)", name)
            }
        }
    }

    @Test func theBearerSchemeIsCaseInsensitiveAndBlanksAroundTheTokenAreIgnored() async throws {
        try await IngressTestApp.with { app in
            for authorization in ["bearer \(app.userToken("u1"))", "BEARER  \(app.userToken("u1")) ", "Bearer \t\(app.userToken("u1"))\t"] {
                let response = await app.get("/api/v1/credits/balance", headers: ["Authorization": authorization])
                #expect(response.status == 200, "\(response.text)")
            }
        }
    }

    @Test func serviceRoutesRefuseUserTokens() async throws {
        try await IngressTestApp.with { app in
            try await expectRefused(app, Self.serviceRoutes, authorization: "Bearer \(app.userToken("u1"))", "user token")
            let response = await app.request(
                "POST", "/api/v1/credits/usage", headers: app.authorized("u1"), body: Array("{}".utf8))
            #expect(try response.json()["message"] as? String == "not a service token")
        }
    }

    @Test func serviceRoutesRefuseMissingAndUnknownServiceTokens() async throws {
        try await IngressTestApp.with { app in
            try await expectRefused(app, Self.serviceRoutes, authorization: nil, "none")
            try await expectRefused(app, Self.serviceRoutes, authorization: "Bearer \(app.serviceToken)x", "longer")
            try await expectRefused(app, Self.serviceRoutes, authorization: "Bearer \(app.serviceToken.dropLast())", "shorter")
            try await expectRefused(app, Self.serviceRoutes, authorization: "Basic \(app.serviceToken)", "wrong scheme")
        }
    }

    @Test func userRoutesRefuseServiceTokens() async throws {
        try await IngressTestApp.with { app in
            try await expectRefused(app, Self.userRoutes, authorization: "Bearer \(app.serviceToken)", "service token")
        }
    }

    @Test func aServiceTokenOpensTheMeteringRoutes() async throws {
        try await IngressTestApp.with { app in
            // Past authentication: the parameters are checked next.
            let check = await app.get("/api/v1/credits/check", headers: app.serviceAuthorization)
            #expect(check.status == 400, "\(check.text)")
            #expect(check.code == "INVALID_REQUEST")
        }
    }

    @Test func openRoutesNeedNoToken() async throws {
        try await IngressTestApp.with { app in
            let health = await app.get("/healthz")
            #expect(health.status == 200)
            let status = try health.json()["status"] as? String
            #expect(status == "ok")
            let document = await app.get("/openapi.json")
            #expect(document.status == 200)
            let version = try document.json()["openapi"]
            #expect(version is String)
        }
    }

    @Test func refusalsNeverLogTheCredentials() async throws {
        try await IngressTestApp.with { app in
            try await expectRefused(app, Self.userRoutes, authorization: "Bearer \(app.serviceToken)", "service token")
            try await expectRefused(app, Self.serviceRoutes, authorization: "Bearer \(app.userToken("u1"))", "user token")
            #expect(app.leakedSecrets().isEmpty, "\(app.leakedSecrets())")
        }
    }
}
