import Crypto
import Foundation
import HTTPServer
import ServiceRuntime
import TestSupport
import Testing

@testable import IngressApp

/// The entitlement reads (user and service tokens), their signed answers checked by an
/// independent implementation against the served key, and the admin API's promotional grants.
@Suite(.timeLimit(.minutes(3)))
struct EntitlementRouteTests {
    static func items(_ response: TestResponse) throws -> [[String: Any]] {
        try #require(try response.json()["entitlements"] as? [[String: Any]], "\(response.status) \(response.text)")
    }

    @Test func theUserAndTheAppsServicesReadTheSameEntitlements() async throws {
        try await IngressTestApp.with { app in
            try await app.rows.applyDemoCatalogue()
            #expect(try Self.items(await app.get("/api/v1/entitlements", headers: app.authorized("nobody"))).isEmpty)
            let expires = wholeSeconds(30 * 86_400)
            try await app.rows.addSubscription(
                user: "u1", product: "com.example.pro.yearly", status: "ACTIVE", expiresAt: expires, originalTransactionID: "3000000001")
            try await app.rows.addSubscription(
                user: "u1", product: "com.example.starter.monthly", status: "EXPIRED", expiresAt: wholeSeconds(-86_400),
                autoRenew: false, originalTransactionID: "3000000002")
            let own = await app.get("/api/v1/entitlements", headers: app.authorized("u1"))
            #expect(own.status == 200)
            let items = try Self.items(own)
            #expect(items.map { $0["entitlement"] as? String } == ["pro", "starter"])
            #expect(items.map { $0["active"] as? Bool } == [true, false])
            #expect(items[0]["source"] as? String == "APPLE" && items[0]["status"] as? String == "ACTIVE")
            #expect(items[0]["productId"] as? String == "com.example.pro.yearly" && items[0]["willRenew"] as? Bool == true)
            #expect(items[0]["expiresAt"] as? String == RFC3339.string(from: expires))
            #expect(items[0]["originalTransactionId"] as? String == "3000000001" && items[0]["environment"] as? String == "Sandbox")
            // Every field is there, null when it has no value.
            #expect(items[1]["promotionalExpiresAt"] is NSNull && items[1]["gracePeriodExpiresAt"] is NSNull)
            #expect(items[1]["status"] as? String == "EXPIRED")

            let service = await app.get("/api/v1/users/u1/entitlements", headers: app.serviceAuthorization)
            #expect(service.status == 200 && service.text == own.text)
            #expect(try Self.items(await app.get("/api/v1/users/nobody/entitlements", headers: app.serviceAuthorization)).isEmpty)
            // Only service tokens open another user's entitlements; a service token is no user.
            #expect(await app.get("/api/v1/users/u1/entitlements", headers: app.authorized("u1")).status == 401)
            #expect(await app.get("/api/v1/users/u1/entitlements").status == 401)
            #expect(await app.get("/api/v1/entitlements", headers: app.serviceAuthorization).status == 401)
            // Unsigned without a key, whatever the client asks.
            let asked = await app.get("/api/v1/entitlements", headers: app.authorized("u1").merging(["X-Nonce": "n-12345678"]) { a, _ in a })
            #expect(asked.status == 200 && asked.header("Entitlements-Signature") == nil)
            #expect(await app.get("/api/v1/entitlements/signing-key").code == "NOT_FOUND")
        }
    }

    /// A signed answer verifies with Python's `cryptography` against the served JWK; a forged
    /// body, another nonce or another user does not.
    @Test func signedAnswersVerifyIndependently() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("entitlements-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let keyFile = folder.appendingPathComponent("signing.pem")
        try Data(P256PrivateKey.generate().pemPKCS8().utf8).write(to: keyFile)
        try await IngressTestApp.with(extra: ["ENTITLEMENT_SIGNING_KEY_PATH": keyFile.path]) { app in
            try await app.rows.applyDemoCatalogue()
            try await app.rows.addSubscription(user: "u1", product: "com.example.pro.monthly", status: "ACTIVE", expiresAt: wholeSeconds(86_400))
            let jwk = await app.get("/api/v1/entitlements/signing-key")
            #expect(jwk.status == 200)
            let jwkFile = folder.appendingPathComponent("jwk.json")
            try Data(jwk.response.body).write(to: jwkFile)
            #expect(try jwk.json()["kty"] as? String == "EC" && jwk.json()["alg"] as? String == "ES256")

            let nonce = UUID().uuidString
            var headers = app.authorized("u1")
            headers["X-Nonce"] = nonce
            let answer = await app.get("/api/v1/entitlements", headers: headers)
            let signature = try #require(answer.header("Entitlements-Signature"))
            func check(body: [UInt8], nonce: String, user: String) throws -> String {
                let bodyFile = folder.appendingPathComponent("body-\(UUID().uuidString).json")
                try Data(body).write(to: bodyFile)
                return try SignatureScript.run(
                    "verify_entitlements_signature.py", [jwkFile.path, bodyFile.path, signature, nonce, user])
            }
            #expect(try check(body: answer.response.body, nonce: nonce, user: "u1") == "valid")
            let forged = Array(answer.text.replacingOccurrences(of: "\"active\":true", with: "\"active\":false").utf8)
            #expect(forged != answer.response.body)
            #expect(try check(body: forged, nonce: nonce, user: "u1") == "body is not the one signed")
            #expect(try check(body: answer.response.body, nonce: "another-nonce", user: "u1").hasPrefix("nonce is not"))
            #expect(try check(body: answer.response.body, nonce: nonce, user: "u2") == "answer is for another user")
            // The service read signs for the user it names.
            var serviceHeaders = app.serviceAuthorization
            serviceHeaders["X-Nonce"] = nonce
            let forService = await app.get("/api/v1/users/u1/entitlements", headers: serviceHeaders)
            #expect(forService.header("Entitlements-Signature")?.split(separator: ".").count == 3)
            // A nonce that cannot be one is refused rather than signed.
            headers["X-Nonce"] = "short"
            #expect(await app.get("/api/v1/entitlements", headers: headers).code == "INVALID_REQUEST")
        }
    }

    /// A key path that holds no P-256 key stops the ingress at start-up.
    @Test func aBadSigningKeyIsRefusedAtStartUp() throws {
        let reader = ConfigurationReader(environment: ["ENTITLEMENT_SIGNING_KEY_PATH": "/nonexistent/key.pem"])
        #expect(IngressConfiguration.signingKey(reader, "ENTITLEMENT_SIGNING_KEY_PATH") == nil)
        #expect(throws: ConfigurationError.self) { try reader.validate() }
    }

    @Test func operatorsGrantAndRevokeViewersRead() async throws {
        try await AdminTestApp.with { admin in
            let app = admin.app
            try await app.rows.applyDemoCatalogue()
            try await app.rows.addUser("u1")
            let path = "/admin/v1/users/u1/entitlements/pro/grants"
            let viewer = try await admin.request("POST", path, token: admin.viewerToken, json: ["duration": "P7D", "reason": "r"])
            #expect(viewer.status == 403)
            #expect(
                try await admin.act("/admin/v1/users/u1/entitlements/Pro/grants", ["duration": "P7D", "reason": "r"]).code == "INVALID_ENTITLEMENT")
            #expect(try await admin.act("/admin/v1/users/nobody/entitlements/pro/grants", ["duration": "P7D", "reason": "r"]).status == 404)
            #expect(try await admin.act(path, ["duration": "P7D"]).code == "INVALID_REQUEST")
            #expect(try await admin.act(path, ["duration": "7 days", "reason": "r"]).code == "INVALID_REQUEST")
            #expect(
                try await admin.act(path, ["duration": "P7D", "expiresAt": RFC3339.string(from: wholeSeconds(86_400)), "reason": "r"]).code
                    == "INVALID_REQUEST")
            #expect(try await admin.act(path, ["expiresAt": RFC3339.string(from: wholeSeconds(-60)), "reason": "r"]).code == "EXPIRY_NOT_IN_FUTURE")
            #expect(try await admin.act(path, ["duration": "P11Y", "reason": "r"]).code == "GRANT_TOO_LONG")

            let granted = try await admin.act(path, ["duration": "P7D", "reason": "outage apology"])
            #expect(granted.status == 201, "\(granted.text)")
            let grant = try granted.json()
            #expect(grant["entitlement"] as? String == "pro" && grant["grantedBy"] as? String == "alice" && grant["inForce"] as? Bool == true)
            let expiresText = try #require(grant["expiresAt"] as? String)
            let expires = try #require(RFC3339.date(from: expiresText))
            #expect(abs(expires.timeIntervalSinceNow - 7 * 86_400) < 600)
            let user = try Self.items(await app.get("/api/v1/entitlements", headers: app.authorized("u1")))
            #expect(user.map { $0["source"] as? String } == ["PROMOTIONAL"] && user.map { $0["active"] as? Bool } == [true])

            let overview = try await admin.get("/admin/v1/users/u1/entitlements")
            #expect(overview.status == 200)
            #expect((try overview.json()["summary"] as? String)?.hasPrefix("pro (promotional) until ") == true)
            #expect((try overview.json()["grants"] as? [[String: Any]])?.count == 1)

            #expect(try await admin.request("DELETE", path, token: admin.viewerToken, json: ["reason": "r"]).status == 403)
            let revoked = try await admin.request("DELETE", path, token: admin.operatorToken, json: ["reason": "granted by mistake"])
            #expect(revoked.status == 200, "\(revoked.text)")
            let revokedGrants = try #require(try revoked.json()["revoked"] as? [[String: Any]])
            #expect(revokedGrants.map { $0["revokedBy"] as? String } == ["alice"] && revokedGrants.map { $0["inForce"] as? Bool } == [false])
            #expect(try await admin.request("DELETE", path, token: admin.operatorToken, json: ["reason": "again"]).code == "GRANT_NOT_FOUND")
            let after = try Self.items(await app.get("/api/v1/entitlements", headers: app.authorized("u1")))
            #expect(after.map { $0["active"] as? Bool } == [false])
            // One audit row each, found by the support case of the user.
            let lookup = try await admin.get("/admin/v1/lookup?q=u1")
            let audit = try #require(((try lookup.json()["case"] as? [String: Any])?["audit"] as? [[String: Any]]))
            #expect(audit.compactMap { $0["action"] as? String } == ["ENTITLEMENT_GRANTED", "ENTITLEMENT_REVOKED"])
        }
    }
}
