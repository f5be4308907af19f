import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import HTTPServer
import Postgres
import TestSupport
import Testing

@testable import IngressApp

/// `/admin/v1/apple/extend-all` through the admin router, against the App Store mock.
@Suite(.timeLimit(.minutes(3)))
struct AppleAdminRouteTests {
    /// The admin app with the App Store Server API key pointing at a mock (complete after two reads).
    static func with(_ body: (AdminTestApp, MockAppStoreServerAPI) async throws -> Void) async throws {
        let key = P256PrivateKey.generate()
        let keyPath = FileManager.default.temporaryDirectory.appendingPathComponent("api-key-\(UUID().uuidString).p8")
        try Data(key.pemPKCS8().utf8).write(to: keyPath)
        defer { try? FileManager.default.removeItem(at: keyPath) }
        let mock = MockAppStoreServerAPI(
            signer: try TestAppleSigner(),
            credentials: .init(issuerId: "issuer-admin", keyId: "KEYADM01", bundleId: IngressTestApp.bundleID, publicKey: key.publicKey),
            environment: .sandbox, massExtensionPolls: 1)
        let url = try mock.start()
        try await withResource({ mock }, cleanUp: { await $0.shutdown() }) { mock in
            let extra = [
                "APPLE_IAP_ISSUER_ID": "issuer-admin", "APPLE_IAP_KEY_ID": "KEYADM01", "APPLE_IAP_PRIVATE_KEY_PATH": keyPath.path,
                "APPLE_IAP_API_BASE_URL_SANDBOX": url.absoluteString,
            ]
            try await AdminTestApp.with(extra: extra) { admin in try await body(admin, mock) }
        }
    }

    @Test func anOperatorExtendsEveryoneOnceAndFollowsAppleToCompletion() async throws {
        try await Self.with { admin, mock in
            for _ in 0..<2 {
                try mock.addTransaction(
                    TestPayloads.transaction(bundleId: IngressTestApp.bundleID, environment: .sandbox, productId: IngressTestApp.monthly))
            }
            let body: [String: Any] = [
                "productId": IngressTestApp.monthly, "extendByDays": 10, "extendReasonCode": 3, "reason": "outage 2026-12-07",
            ]
            let viewer = try await admin.request("POST", "/admin/v1/apple/extend-all", token: admin.viewerToken, json: body)
            #expect(viewer.status == 403, "\(viewer.text)")
            #expect(mock.massExtensionRequests.isEmpty)

            let accepted = try await admin.act("/admin/v1/apple/extend-all", body)
            #expect(accepted.status == 202, "\(accepted.text)")
            let answer = try accepted.json()
            let id = try #require(answer["requestIdentifier"] as? String)
            #expect(answer["sent"] as? Bool == true && answer["complete"] as? Bool == false && answer["requestedBy"] as? String == "alice")
            #expect(mock.massExtensionRequests.map(\.requestIdentifier) == [id])
            #expect(mock.massExtensionRequests.first?.extendByDays == 10)

            let again = try await admin.act("/admin/v1/apple/extend-all", body)
            let repeated = try again.json()
            #expect(again.status == 200 && repeated["sent"] as? Bool == false, "\(again.text)")
            #expect(mock.massExtensionRequests.count == 1, "the same request is not sent twice")

            let audited: Int = try await admin.app.pool.query(
                "SELECT count(*)::int AS n FROM audit_log WHERE action = 'RENEWAL_DATES_EXTENDED_FOR_ALL' AND operator = 'alice'"
            ).single().decode("n")
            #expect(audited == 1)

            let pending = try await admin.get("/admin/v1/apple/extend-all/\(id)")
            let pendingAnswer = try pending.json()
            #expect(pending.status == 200 && pendingAnswer["complete"] as? Bool == false, "\(pending.text)")
            let done = try await admin.get("/admin/v1/apple/extend-all/\(id)")
            let status = try done.json()
            #expect(done.status == 200 && status["complete"] as? Bool == true, "\(done.text)")
            #expect(status["succeededCount"] as? Int == 2 && status["failedCount"] as? Int == 0 && status["completeDate"] != nil)
            // Complete is final: Apple is not asked again.
            let asked = mock.requests.count
            let stored = try await admin.get("/admin/v1/apple/extend-all/\(id)")
            #expect(stored.status == 200)
            #expect(mock.requests.count == asked)
        }
    }

    @Test func badInputAndUnknownRequestsAnswerErrorCodes() async throws {
        try await Self.with { admin, mock in
            let tooLong = try await admin.act(
                "/admin/v1/apple/extend-all", ["productId": IngressTestApp.monthly, "extendByDays": 91, "reason": "outage"])
            #expect(tooLong.status == 400 && tooLong.code == "INVALID_REQUEST" && tooLong.text.contains("1 to 90"), "\(tooLong.text)")
            let noReason = try await admin.act("/admin/v1/apple/extend-all", ["productId": IngressTestApp.monthly, "extendByDays": 5])
            #expect(noReason.status == 400 && noReason.text.contains("reason"), "\(noReason.text)")
            #expect(mock.massExtensionRequests.isEmpty)

            mock.enqueue(.init(status: 400, errorCode: 4_000_023, pathPrefix: "/inApps/v1/subscriptions/extend/mass"))
            let refused = try await admin.act(
                "/admin/v1/apple/extend-all", ["productId": "com.example.gone", "extendByDays": 5, "reason": "outage"])
            #expect(refused.status == 502 && refused.code == "APPLE_REFUSED" && refused.text.contains("4000023"), "\(refused.text)")

            let unknown = try await admin.get("/admin/v1/apple/extend-all/\(UUID().uuidString)")
            #expect(unknown.status == 404 && unknown.code == "EXTENSION_NOT_FOUND", "\(unknown.text)")
            let notAnID = try await admin.get("/admin/v1/apple/extend-all/not-a-uuid")
            #expect(notAnID.status == 400 && notAnID.code == "INVALID_REQUEST", "\(notAnID.text)")
        }
    }

    @Test func withoutTheAPIKeyTheRoutesSayItIsNotConfigured() async throws {
        try await AdminTestApp.with { admin in
            let answer = try await admin.act(
                "/admin/v1/apple/extend-all", ["productId": IngressTestApp.monthly, "extendByDays": 5, "reason": "outage"])
            #expect(answer.status == 503 && answer.code == "APPLE_API_NOT_CONFIGURED", "\(answer.text)")
        }
    }
}
