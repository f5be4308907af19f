import AppStore
import AppStoreTestSupport
import Catalogue
import Crypto
import Domain
import Foundation
import Postgres
import Storage
import TestSupport
import Testing

@testable import IngressApp

/// Apple's Get Retention Message endpoint through the router: requests signed at test time by the
/// test Apple chain, the catalogue's rules, the record once per request, the refusals that record
/// nothing, and a rescinded user's default answer.
@Suite(.timeLimit(.minutes(3)))
struct RetentionRouteTests {
    static let sandboxPath = "/api/v1/iap/apple/retention/sandbox"
    static let productionPath = "/api/v1/iap/apple/retention/production"
    static let product = "com.example.pro.monthly"
    static let german = "5e0b6a7c-1d2e-4f30-8a41-000000000001"
    static let anyLocale = "5e0b6a7c-1d2e-4f30-8a41-000000000002"
    static let withOffer = "5e0b6a7c-1d2e-4f30-8a41-000000000003"
    static let switchPlan = "5e0b6a7c-1d2e-4f30-8a41-000000000004"
    static let yearly = "com.example.pro.yearly"
    static let on = ["RETENTION_MESSAGING_ENABLED": "true"]

    /// The demo catalogue's pro plan with a switch to the yearly plan (billed monthly over a
    /// 12-month commitment) for French speakers, a German message, an offer for subscribers in
    /// Britain, and a message for everyone else.
    static func applyRetentionCatalogue(_ app: IngressTestApp) async throws {
        let file = try CatalogueFile.load(path: ServiceProcess.packageRoot.appendingPathComponent("deploy/local/catalog.json").path)
        var products = file.products
        let index = try #require(products.firstIndex { $0.productID == product })
        products[index].offers = [CatalogueOffer(offerIdentifier: "loyal20", audience: .subscribed)]
        products[index].retentionMessages = [
            RetentionRule(messageIdentifier: switchPlan, locales: ["fr"], alternateProductId: yearly),
            RetentionRule(messageIdentifier: german, locales: ["de"]),
            RetentionRule(messageIdentifier: withOffer, locales: ["en-GB"], offerIdentifier: "loyal20"),
            RetentionRule(messageIdentifier: anyLocale),
        ]
        let yearlyIndex = try #require(products.firstIndex { $0.productID == yearly })
        products[yearlyIndex].billingPlan = .monthly
        try await CatalogueStore(pool: app.pool).apply(
            CatalogueFile(appKey: file.appKey, products: products), operator: "test", reason: "retention")
    }

    /// Apple's DecodedRealtimeRequestBody for `transaction`, signed with `signer` (the app's own by default).
    static func signedRequest(
        _ app: IngressTestApp, transaction: String, locale: String = "en-US", requestID: UUID = UUID(),
        environment: AppStoreEnvironment = .sandbox, appAppleId: Int64 = 1_234_567_890, signer: TestAppleSigner? = nil
    ) throws -> String {
        var body = DecodedRealtimeRequestBody()
        body.originalTransactionId = transaction
        body.appAppleId = appAppleId
        body.productId = product
        body.userLocale = locale
        body.requestIdentifier = requestID.uuidString
        body.signedDate = Date()
        body.environment = environment
        return try (signer ?? app.signer).sign(body)
    }

    /// The `message.messageIdentifier` of an answer that chose a message and nothing else.
    static func message(_ response: TestResponse) throws -> String? {
        let json = try response.json()
        guard json.keys.sorted() == ["message"] else { return nil }
        return (json["message"] as? [String: Any])?["messageIdentifier"] as? String
    }

    func ask(_ app: IngressTestApp, _ jws: String, path: String = sandboxPath) async throws -> TestResponse {
        try await app.post(path, json: ["signedPayload": jws])
    }

    func recorded(_ app: IngressTestApp) async throws -> Int {
        try await app.count("SELECT count(*) FROM retention_message_answer")
    }

    @Test func theFirstFittingRuleIsAnsweredAndRecordedOncePerRequest() async throws {
        try await IngressTestApp.with(extra: Self.on) { app in
            try await Self.applyRetentionCatalogue(app)
            try await app.rows.addSubscription(
                user: "ann", product: Self.product, status: "ACTIVE", expiresAt: Date() + 86_400, originalTransactionID: "2000000000000501")
            let request = try Self.signedRequest(app, transaction: "2000000000000501", locale: "en-US")
            let first = try await ask(app, request)
            #expect(first.status == 200, "\(first.text)")
            #expect(try Self.message(first) == Self.anyLocale)
            // Apple's retry of the same request: the same answer, one record.
            let again = try await ask(app, request)
            #expect(again.status == 200 && again.text == first.text)
            let german = try await ask(app, try Self.signedRequest(app, transaction: "2000000000000501", locale: "de-CH"))
            #expect(try Self.message(german) == Self.german)
            let record = try await RetentionMessageStore(pool: app.pool).answers(
                originalTransactionID: "2000000000000501", environment: "Sandbox")
            #expect(record.count == 2)
            #expect(record.map(\.userID) == ["ann", "ann"])
            #expect(Set(record.map(\.answer)) == [.message(messageIdentifier: Self.anyLocale), .message(messageIdentifier: Self.german)])
            #expect(Set(record.map(\.userLocale)) == ["en-US", "de-CH"])
        }
    }

    @Test func aSubscriberGetsTheOfferSignedForTheirTransaction() async throws {
        let key = try OfferRouteTests.Key()
        defer { try? FileManager.default.removeItem(at: key.folder) }
        try await IngressTestApp.with(extra: Self.on.merging(key.environment) { _, new in new }) { app in
            try await Self.applyRetentionCatalogue(app)
            try await app.rows.addSubscription(
                user: "bob", product: Self.product, status: "ACTIVE", expiresAt: Date() + 86_400, originalTransactionID: "2000000000000502")
            let answer = try await ask(app, try Self.signedRequest(app, transaction: "2000000000000502", locale: "en-GB"))
            #expect(answer.status == 200, "\(answer.text)")
            let offer = try #require(try answer.json()["promotionalOffer"] as? [String: Any])
            #expect(offer["messageIdentifier"] as? String == Self.withOffer)
            let jws = try #require(offer["promotionalOfferSignatureV2"] as? String)
            let claims: [String: Any] = ["productId": Self.product, "offerIdentifier": "loyal20", "transactionId": "2000000000000502"]
            #expect(try OfferRouteTests.check(jws, key: key, audience: "promotional-offer", claims: claims) == "valid")
            let record = try await RetentionMessageStore(pool: app.pool).answers(
                originalTransactionID: "2000000000000502", environment: "Sandbox")
            #expect(record.map(\.answer) == [.promotionalOffer(messageIdentifier: Self.withOffer, offerIdentifier: "loyal20")])

            // A chain we do not know has no standing for the offer: the next rule, recorded without a user.
            let stranger = try await ask(app, try Self.signedRequest(app, transaction: "2000000000000999", locale: "en-GB"))
            #expect(try Self.message(stranger) == Self.anyLocale)
            let strangers = try await RetentionMessageStore(pool: app.pool).answers(
                originalTransactionID: "2000000000000999", environment: "Sandbox")
            #expect(strangers.count == 1 && strangers[0].userID == nil)
        }
    }

    @Test func aSwitchToAnotherPlanOfTheGroupIsSuggestedUnlessTheSubscriberIsAlreadyHeadingThere() async throws {
        try await IngressTestApp.with(extra: Self.on) { app in
            try await Self.applyRetentionCatalogue(app)
            try await app.rows.addSubscription(
                user: "cara", product: Self.product, status: "ACTIVE", expiresAt: Date() + 86_400, originalTransactionID: "2000000000000511")
            let answer = try await ask(app, try Self.signedRequest(app, transaction: "2000000000000511", locale: "fr-FR"))
            #expect(answer.status == 200, "\(answer.text)")
            let json = try answer.json()
            #expect(json.keys.sorted() == ["alternateProduct"], "\(answer.text)")
            let alternate = try #require(json["alternateProduct"] as? [String: Any])
            #expect(alternate["messageIdentifier"] as? String == Self.switchPlan)
            #expect(alternate["productId"] as? String == Self.yearly)
            #expect(alternate["billingPlanType"] as? String == "MONTHLY", "the yearly plan is billed monthly over its commitment")
            let record = try await RetentionMessageStore(pool: app.pool).answers(
                originalTransactionID: "2000000000000511", environment: "Sandbox")
            #expect(record.map(\.answer) == [.alternateProduct(messageIdentifier: Self.switchPlan, productId: Self.yearly)])
            #expect(record.map(\.userID) == ["cara"])
            let kind: String = try await app.pool.query(
                "SELECT answer || ':' || alternate_product_id AS kind FROM retention_message_answer WHERE original_transaction_id = '2000000000000511'"
            ).single().decode("kind")
            #expect(kind == "ALTERNATE_PRODUCT:\(Self.yearly)")

            // Already switching to the yearly plan at the next renewal: the next fitting rule.
            try await app.rows.addSubscription(
                user: "dan", product: Self.product, status: "ACTIVE", expiresAt: Date() + 86_400, pendingProduct: Self.yearly,
                originalTransactionID: "2000000000000512")
            let switching = try await ask(app, try Self.signedRequest(app, transaction: "2000000000000512", locale: "fr-FR"))
            #expect(try Self.message(switching) == Self.anyLocale, "\(switching.text)")
        }
    }

    @Test func aUserWhoseConsentWasRescindedGetsTheDefaultAndLeavesNoRecord() async throws {
        try await IngressTestApp.with(extra: Self.on) { app in
            try await Self.applyRetentionCatalogue(app)
            try await app.rows.addSubscription(
                user: "minor", product: Self.product, status: "ACTIVE", expiresAt: Date() + 86_400, originalTransactionID: "2000000000000503")
            _ = try await app.pool.query("UPDATE app_user SET consent_rescinded_at = now() WHERE user_id = 'minor'")
            let answer = try await ask(app, try Self.signedRequest(app, transaction: "2000000000000503", locale: "de-DE"))
            #expect(answer.status == 200, "\(answer.text)")
            #expect(try answer.json().isEmpty)
            #expect(try await recorded(app) == 0)
        }
    }

    @Test func whatAppleDidNotSignIsRefusedAndRecordsNothing() async throws {
        try await IngressTestApp.with(extra: Self.on) { app in
            try await Self.applyRetentionCatalogue(app)
            let good = try Self.signedRequest(app, transaction: "2000000000000504")
            // Another chain than the trusted one.
            let stranger = try Self.signedRequest(app, transaction: "2000000000000504", signer: try TestAppleSigner())
            let untrusted = try await ask(app, stranger)
            #expect(untrusted.status == 401, "\(untrusted.text)")
            #expect(try untrusted.json()["code"] as? String == "INVALID_CHAIN")
            // A payload changed after signing.
            let parts = good.split(separator: ".")
            let payload = String(decoding: try #require(Base64URL.decode(parts[1])), as: UTF8.self)
                .replacingOccurrences(of: "2000000000000504", with: "2000000000000505")
            let tampered = try await ask(app, "\(parts[0]).\(Base64URL.encode(Array(payload.utf8))).\(parts[2])")
            #expect(tampered.status == 401)
            #expect(try tampered.json()["code"] as? String == "INVALID_SIGNATURE")
            // A Sandbox request sent to the Production endpoint.
            let elsewhere = try await ask(app, good, path: Self.productionPath)
            #expect(elsewhere.status == 400 || elsewhere.status == 403, "\(elsewhere.text)")
            #expect(try elsewhere.json()["code"] as? String != nil)
            let junk = try await app.post(Self.sandboxPath, json: ["signedPayload": 7])
            #expect(junk.status == 400)
            #expect(try junk.json()["code"] as? String == "INVALID_REQUEST")
            #expect(try await recorded(app) == 0)
            // The same request as Apple signed it goes through.
            #expect(try await ask(app, good).status == 200)
            #expect(try await recorded(app) == 1)
        }
    }

    @Test func productionChecksTheAppAppleId() async throws {
        try await IngressTestApp.with(environment: .production, extra: Self.on) { app in
            try await Self.applyRetentionCatalogue(app)
            let other = try Self.signedRequest(app, transaction: "2000000000000506", environment: .production, appAppleId: 42)
            let refused = try await ask(app, other, path: Self.productionPath)
            #expect(refused.status == 403, "\(refused.text)")
            #expect(try refused.json()["code"] as? String == "INVALID_APP")
            let ours = try Self.signedRequest(app, transaction: "2000000000000506", environment: .production)
            let answered = try await ask(app, ours, path: Self.productionPath)
            #expect(answered.status == 200, "\(answered.text)")
            #expect(try await recorded(app) == 1)
        }
    }

    @Test func offUnlessConfigured() async throws {
        try await IngressTestApp.with { app in
            try await Self.applyRetentionCatalogue(app)
            let answer = try await ask(app, try Self.signedRequest(app, transaction: "2000000000000507"))
            #expect(answer.status == 404)
            #expect(try answer.json()["code"] as? String == "RETENTION_MESSAGING_DISABLED")
            #expect(try await recorded(app) == 0)
        }
    }
}
