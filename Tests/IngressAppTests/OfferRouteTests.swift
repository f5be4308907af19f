import Catalogue
import Crypto
import Domain
import Foundation
import HTTPServer
import Storage
import TestSupport
import Testing

@testable import IngressApp

/// `POST /api/v1/subscriptions/offers/signature` through the router: the JWS checked by an
/// independent Python reading of Apple's header and claims and the ES256 signature, the
/// catalogue's audiences, the audit, the refusals and the per-user budget.
@Suite(.timeLimit(.minutes(3)))
struct OfferRouteTests {
    static let path = "/api/v1/subscriptions/offers/signature"
    static let product = "com.example.pro.monthly"
    static let issuer = "57246542-96fe-1a63-e053-0824d011072a"
    static let keyID = "OFFERKEY01"

    /// An App Store key made for this test, written as the `.p8` file the ingress reads.
    struct Key {
        let folder: URL
        let file: URL

        init() throws {
            folder = FileManager.default.temporaryDirectory.appendingPathComponent("offers-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            file = folder.appendingPathComponent("AuthKey.p8")
            try Data(P256PrivateKey.generate().pemPKCS8().utf8).write(to: file)
        }

        var environment: [String: String] {
            ["APPLE_IAP_ISSUER_ID": OfferRouteTests.issuer, "APPLE_IAP_KEY_ID": OfferRouteTests.keyID, "APPLE_IAP_PRIVATE_KEY_PATH": file.path]
        }
    }

    /// The demo catalogue's pro plan with three promotional offers and an introductory offer.
    static func applyOfferCatalogue(_ app: IngressTestApp) async throws {
        let file = try CatalogueFile.load(path: ServiceProcess.packageRoot.appendingPathComponent("deploy/local/catalog.json").path)
        var products = file.products
        let index = try #require(products.firstIndex { $0.productID == product })
        products[index].offers = [
            CatalogueOffer(offerIdentifier: "winback50", audience: .lapsed),
            CatalogueOffer(offerIdentifier: "loyal20", audience: .subscribed),
            CatalogueOffer(offerIdentifier: "welcome", audience: .newToGroup),
            CatalogueOffer(offerIdentifier: "everyone", audience: .anyone),
        ]
        products[index].introductoryOffer = true
        try await CatalogueStore(pool: app.pool).apply(
            CatalogueFile(appKey: file.appKey, products: products), operator: "test", reason: "offers")
    }

    /// What the Python check says of `jws` against the expected feature claims.
    static func check(_ jws: String, key: Key, audience: String, claims: [String: Any]) throws -> String {
        let expected: [String: Any] = ["kid": keyID, "iss": issuer, "bid": IngressTestApp.bundleID, "aud": audience, "claims": claims]
        return try SignatureScript.run(
            "verify_offer_signature.py",
            [key.file.path, jws, String(decoding: try JSONSerialization.data(withJSONObject: expected), as: UTF8.self)])
    }

    func ask(_ app: IngressTestApp, _ user: String, _ body: [String: Any]) async throws -> TestResponse {
        try await app.post(Self.path, json: body, headers: app.authorized(user))
    }

    @Test func aLapsedUserGetsTheWinBackOfferSignedAsAppleReadsIt() async throws {
        let key = try Key()
        defer { try? FileManager.default.removeItem(at: key.folder) }
        try await IngressTestApp.with(extra: key.environment) { app in
            try await Self.applyOfferCatalogue(app)
            try await app.rows.addSubscription(
                user: "lapsed", product: Self.product, status: "EXPIRED", expiresAt: Date() - 86_400, originalTransactionID: "2000000000000777")
            let answer = try await ask(app, "lapsed", ["productId": Self.product, "offerIdentifier": "winback50", "kind": "PROMOTIONAL"])
            #expect(answer.status == 200, "\(answer.text)")
            let json = try answer.json()
            let jws = try #require(json["jws"] as? String)
            #expect(json["offerIdentifier"] as? String == "winback50" && json["keyId"] as? String == Self.keyID)
            #expect(json["transactionId"] as? String == "2000000000000777")
            let claims: [String: Any] = ["productId": Self.product, "offerIdentifier": "winback50", "transactionId": "2000000000000777"]
            #expect(try Self.check(jws, key: key, audience: "promotional-offer", claims: claims) == "valid")
            // The check can fail: another offer, another audience, a payload changed after signing.
            var other = claims
            other["offerIdentifier"] = "loyal20"
            #expect(try Self.check(jws, key: key, audience: "promotional-offer", claims: other).hasPrefix("feature claims"))
            #expect(try Self.check(jws, key: key, audience: "introductory-offer-eligibility", claims: claims).hasPrefix("aud"))
            let parts = jws.split(separator: ".")
            let forgedClaims = String(decoding: try #require(Base64URL.decode(parts[1])), as: UTF8.self)
                .replacingOccurrences(of: "winback50", with: "loyal20")
            let forged = "\(parts[0]).\(Base64URL.encode(Array(forgedClaims.utf8))).\(parts[2])"
            #expect(try Self.check(forged, key: key, audience: "promotional-offer", claims: other) == "signature does not verify")

            // The audit holds what was signed for whom, under the nonce the JWS carries.
            let audit = try await OfferSignatureStore(pool: app.pool).signatures(userID: "lapsed")
            #expect(audit.count == 1)
            #expect(audit.first?.offerIdentifier == "winback50" && audit.first?.kind == .promotional)
            #expect(audit.first?.nonce.uuidString.lowercased() == json["nonce"] as? String)
            #expect(audit.first?.transactionID == "2000000000000777" && audit.first?.keyID == Self.keyID)

            // Offers for other audiences are refused to this user, and the refusals are not signed.
            let loyal = try await ask(app, "lapsed", ["productId": Self.product, "offerIdentifier": "loyal20", "kind": "PROMOTIONAL"])
            #expect(loyal.status == 403 && loyal.code == "OFFER_NOT_ELIGIBLE")
            let welcome = try await ask(app, "lapsed", ["productId": Self.product, "offerIdentifier": "welcome", "kind": "PROMOTIONAL"])
            #expect(welcome.status == 403 && welcome.code == "OFFER_NOT_ELIGIBLE")
            #expect(try await app.count("SELECT count(*) FROM offer_signature") == 1)
            #expect(app.leakedSecrets().isEmpty)
        }
    }

    @Test func aSubscriberGetsRetentionOffersOnlyAndANewUserTheWelcomeOne() async throws {
        let key = try Key()
        defer { try? FileManager.default.removeItem(at: key.folder) }
        try await IngressTestApp.with(extra: key.environment) { app in
            try await Self.applyOfferCatalogue(app)
            try await app.rows.addSubscription(user: "subscriber", product: Self.product, status: "ACTIVE", expiresAt: Date() + 86_400)
            func code(_ user: String, _ offer: String) async throws -> Int {
                try await ask(app, user, ["productId": Self.product, "offerIdentifier": offer, "kind": "PROMOTIONAL"]).status
            }
            #expect(try await code("subscriber", "loyal20") == 200)
            #expect(try await code("subscriber", "winback50") == 403)
            #expect(try await code("subscriber", "everyone") == 200)
            #expect(try await code("newcomer", "welcome") == 200)
            #expect(try await code("newcomer", "winback50") == 403)
            // A user we know no transaction of gets a promotional signature without transactionId.
            let plain = try await ask(app, "newcomer", ["productId": Self.product, "offerIdentifier": "everyone", "kind": "PROMOTIONAL"])
            #expect(try plain.json()["transactionId"] is NSNull)
            let jws = try #require(try plain.json()["jws"] as? String)
            #expect(
                try Self.check(jws, key: key, audience: "promotional-offer", claims: ["productId": Self.product, "offerIdentifier": "everyone"])
                    == "valid")
        }
    }

    @Test func introductoryEligibilityIsSignedTrueOnlyForUsersNewToTheGroup() async throws {
        let key = try Key()
        defer { try? FileManager.default.removeItem(at: key.folder) }
        try await IngressTestApp.with(extra: key.environment) { app in
            try await Self.applyOfferCatalogue(app)
            let intro: [String: Any] = ["productId": Self.product, "kind": "INTRODUCTORY_ELIGIBILITY"]
            // Apple requires a transaction id here: a user we know none of must send the app's.
            let unknown = try await ask(app, "newcomer", intro)
            #expect(unknown.status == 422 && unknown.code == "APP_TRANSACTION_REQUIRED")
            var withApp = intro
            withApp["appTransactionId"] = "704289572311191123"
            let fresh = try await ask(app, "newcomer", withApp)
            #expect(fresh.status == 200, "\(fresh.text)")
            #expect(try fresh.json()["allowIntroductoryOffer"] as? Bool == true)
            let freshJWS = try #require(try fresh.json()["jws"] as? String)
            let allowed: [String: Any] = ["productId": Self.product, "allowIntroductoryOffer": true, "transactionId": "704289572311191123"]
            #expect(try Self.check(freshJWS, key: key, audience: "introductory-offer-eligibility", claims: allowed) == "valid")

            // A user who had the group (another product of it) is told no, on their own chain.
            try await app.rows.addSubscription(
                user: "former", product: "com.example.starter.monthly", status: "EXPIRED", expiresAt: Date() - 86_400,
                originalTransactionID: "2000000000000888")
            let former = try await ask(app, "former", intro)
            #expect(former.status == 200)
            #expect(try former.json()["allowIntroductoryOffer"] as? Bool == false)
            let formerJWS = try #require(try former.json()["jws"] as? String)
            let refused: [String: Any] = ["productId": Self.product, "allowIntroductoryOffer": false, "transactionId": "2000000000000888"]
            #expect(try Self.check(formerJWS, key: key, audience: "introductory-offer-eligibility", claims: refused) == "valid")
            let audit = try await OfferSignatureStore(pool: app.pool).signatures(userID: "former")
            #expect(audit.map(\.allowIntroductoryOffer) == [false] && audit.first?.kind == .introductoryEligibility)

            // A product whose catalogue entry has no introductory offer gets none signed.
            let yearly = try await ask(app, "former", ["productId": "com.example.pro.yearly", "kind": "INTRODUCTORY_ELIGIBILITY"])
            #expect(yearly.status == 422 && yearly.code == "OFFER_UNAVAILABLE")
        }
    }

    @Test func badRequestsGetTheirErrorCodes() async throws {
        let key = try Key()
        defer { try? FileManager.default.removeItem(at: key.folder) }
        try await IngressTestApp.with(extra: key.environment) { app in
            try await Self.applyOfferCatalogue(app)
            let valid: [String: Any] = ["productId": Self.product, "offerIdentifier": "everyone", "kind": "PROMOTIONAL"]
            #expect(try await app.post(Self.path, json: valid).code == "UNAUTHORIZED")
            let cases: [([String: Any], Int, String)] = [
                (["productId": Self.product, "offerIdentifier": "everyone", "kind": "WIN_BACK"], 400, "INVALID_REQUEST"),
                (["productId": Self.product, "kind": "PROMOTIONAL"], 400, "INVALID_REQUEST"),
                (["productId": Self.product, "offerIdentifier": "x", "kind": "INTRODUCTORY_ELIGIBILITY"], 400, "INVALID_REQUEST"),
                (["productId": "", "offerIdentifier": "everyone", "kind": "PROMOTIONAL"], 400, "INVALID_REQUEST"),
                (["productId": Self.product, "kind": "INTRODUCTORY_ELIGIBILITY", "appTransactionId": "12ab"], 400, "INVALID_REQUEST"),
                (["offerIdentifier": "everyone", "kind": "PROMOTIONAL"], 400, "MALFORMED_JSON"),
                (["productId": "com.example.unknown", "offerIdentifier": "everyone", "kind": "PROMOTIONAL"], 422, "PRODUCT_UNAVAILABLE"),
                (["productId": Self.product, "offerIdentifier": "nosuch", "kind": "PROMOTIONAL"], 422, "OFFER_UNAVAILABLE"),
            ]
            for (index, (body, status, code)) in cases.enumerated() {
                let answer = try await ask(app, "user\(index)", body)
                #expect(answer.status == status && answer.code == code, "\(body): \(answer.status) \(answer.text)")
            }
            #expect(try await app.count("SELECT count(*) FROM offer_signature") == 0)
        }
    }

    @Test func eachUserHasABudgetOfSignatures() async throws {
        let key = try Key()
        defer { try? FileManager.default.removeItem(at: key.folder) }
        let budget = ["OFFER_SIGNATURE_RATE_PER_MINUTE": "1", "OFFER_SIGNATURE_RATE_BURST": "2"]
        try await IngressTestApp.with(extra: key.environment.merging(budget) { _, new in new }) { app in
            try await Self.applyOfferCatalogue(app)
            let body: [String: Any] = ["productId": Self.product, "offerIdentifier": "everyone", "kind": "PROMOTIONAL"]
            #expect(try await ask(app, "busy", body).status == 200)
            #expect(try await ask(app, "busy", body).status == 200)
            let refused = try await ask(app, "busy", body)
            #expect(refused.status == 429 && refused.code == "RATE_LIMITED")
            #expect(refused.header("Retry-After") == "60")
            // Another user's budget is their own.
            #expect(try await ask(app, "calm", body).status == 200)
            #expect(try await OfferSignatureStore(pool: app.pool).signatures(userID: "busy").count == 2)
        }
    }

    @Test func withoutAnAppStoreKeyTheRouteSaysSo() async throws {
        try await IngressTestApp.with { app in
            try await Self.applyOfferCatalogue(app)
            let answer = try await ask(app, "u1", ["productId": Self.product, "offerIdentifier": "everyone", "kind": "PROMOTIONAL"])
            #expect(answer.status == 503 && answer.code == "OFFER_SIGNING_UNAVAILABLE")
        }
    }
}
