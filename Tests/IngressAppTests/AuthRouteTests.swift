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

    /// Sends `token` to one user route; expects the 401 of `expectRefused` with this message.
    func expectRefused(_ app: IngressTestApp, token: String, message: String) async throws {
        try await expectRefused(app, [("GET", "/api/v1/credits/balance")], authorization: "Bearer \(token)", message)
        let response = await app.get("/api/v1/credits/balance", headers: ["Authorization": "Bearer \(token)"])
        #expect(try response.json()["message"] as? String == message)
    }

    @Test func identityProviderTokensOpenTheUserRoutesAndRefusalsSayWhy() async throws {
        try await TestJWKSServer.with { server in
            let keys = [TestSigningKey(.rs256, kid: "r"), TestSigningKey(.es256, kid: "e"), TestSigningKey(.edDSA, kid: "d")]
            server.publish(keys)
            let extra = [
                "USER_TOKEN_HS256_SECRET": "", "USER_TOKEN_JWKS_URL": server.url.absoluteString,
                "USER_TOKEN_ISSUER": "https://id.example.com/", "USER_TOKEN_AUDIENCE": "subscriptions",
            ]
            try await IngressTestApp.with(extra: extra) { app in
                let claims = TestTokens.claims(sub: "u1", extra: #","iss":"https://id.example.com/","aud":"subscriptions""#)
                for key in keys {
                    let response = await app.get("/api/v1/credits/balance", headers: ["Authorization": "Bearer \(key.token(claims))"])
                    #expect(response.status == 200, "\(key.key.algorithm): \(response.text)")
                }
                guard case .rsa(let modulus, _) = keys[0].key.publicKey.components else { throw TestFailure("not an RSA key") }
                let refused = [
                    (
                        keys[0].token(TestTokens.claims(sub: "u1", extra: #","iss":"https://evil.example.com/","aud":"subscriptions""#)),
                        "bearer token from another issuer"
                    ),
                    (
                        keys[1].token(TestTokens.claims(sub: "u1", extra: #","iss":"https://id.example.com/","aud":["other"]"#)),
                        "bearer token for another audience"
                    ),
                    (
                        keys[2].token(
                            TestTokens.claims(sub: "u1", expiresIn: -120, extra: #","iss":"https://id.example.com/","aud":"subscriptions""#)),
                        "bearer token expired"
                    ),
                    (TestSigningKey(.es256, kid: "e").token(claims), "bearer token signature is invalid"),
                    (TestSigningKey(.es256, kid: "unknown").token(claims), "bearer token signed with an unknown key"),
                    (
                        TestTokens.token(header: TestTokens.header(alg: "HS256", kid: "r"), claims: claims) {
                            HMACSHA256.authenticate(key: modulus, message: $0)
                        }, "bearer token algorithm is not accepted"
                    ),
                    (
                        TestTokens.token(header: TestTokens.header(alg: "none", kid: "r"), claims: claims) { _ in [] },
                        "bearer token algorithm is not accepted"
                    ),
                ]
                for (token, message) in refused { try await expectRefused(app, token: token, message: message) }
                #expect(app.leakedSecrets().isEmpty, "\(app.leakedSecrets())")
            }
        }
    }

    @Test func namedHS256SecretsOpenTheUserRoutesByKid() async throws {
        let (old, current) = (Base64URL.encode(SecureRandom.bytes(32)), Base64URL.encode(SecureRandom.bytes(32)))
        let extra = ["USER_TOKEN_HS256_SECRET": "", "USER_TOKEN_HS256_SECRETS": "old:\(old),current:\(current)"]
        try await IngressTestApp.with(extra: extra) { app in
            for token in [TestTokens.hs256(old, kid: "old"), TestTokens.hs256(current, kid: "current"), TestTokens.hs256(current)] {
                let response = await app.get("/api/v1/credits/balance", headers: ["Authorization": "Bearer \(token)"])
                #expect(response.status == 200, "\(response.text)")
            }
            try await expectRefused(app, token: TestTokens.hs256(old, kid: "current"), message: "bearer token signature is invalid")
            try await expectRefused(app, token: TestTokens.hs256(old, kid: "older"), message: "bearer token signed with an unknown key")
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
