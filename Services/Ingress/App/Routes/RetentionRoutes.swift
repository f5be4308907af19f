import AppStore
import Catalogue
import Domain
import Foundation
import HTTPServer
import ServiceRuntime
import Storage

/// Apple's Get Retention Message endpoint (Retention Messaging API):
/// `POST /api/v1/iap/apple/retention/{production,sandbox}`, the URL configured with Apple's
/// Configure Realtime URL. Apple calls it while a subscriber views a subscription they may cancel
/// and waits about 700 ms; without a usable answer it shows the default message set up in App
/// Store Connect, so every failure here costs a personalised message, never the subscription.
///
/// The request is verified as Apple signs it; the catalogue's rules choose a message or an offer;
/// the answer is recorded (once per Apple request id) before it is given, except for a user whose
/// consent was rescinded, who gets the default answer and leaves no record.
struct RetentionRoutes: Sendable {
    static let prefix = "/api/v1/iap/apple/retention"

    /// `RETENTION_MESSAGING_ENABLED`: off, the endpoint answers 404 and Apple shows its default.
    let enabled: Bool
    let verifier: SignedDataVerifier
    let catalogue: CatalogueStore
    let subscriptions: SubscriptionStore
    let answers: RetentionMessageStore
    /// Nil when the App Store key is not configured: rules with an offer are then passed over.
    let signer: StoreKitRequestSigner?
    /// Unverified requests spend the notification endpoints' budget per source.
    let limits: NotificationLimits
    let appKey: String
    let clock: any WallClock

    func register(in retention: inout RouterGroup<IngressRequestContext>) {
        retention.post("production") { request in try await answer(request, endpoint: .production) }
        retention.post("sandbox") { request in try await answer(request, endpoint: .sandbox) }
    }

    static func count(_ outcome: String) {
        MetricsRegistry.shared.counter(
            "subs_retention_requests_total", help: "Get Retention Message requests, by outcome (the answer given, or the refusal)",
            labels: ["outcome": outcome]
        ).increment()
    }

    func answer(_ request: HTTPRequest, endpoint: AppStoreEnvironment) async throws -> HTTPResponse {
        guard enabled else {
            Self.count("disabled")
            throw HTTPError(
                status: 404, code: "RETENTION_MESSAGING_DISABLED",
                message: "retention messaging is off (RETENTION_MESSAGING_ENABLED); Apple shows the default message")
        }
        let asked: DecodedRealtimeRequestBody
        do {
            let body = try AppStoreJSON.decode(RealtimeRequestBody.self, from: request.body)
            guard let signedPayload = body.signedPayload else { throw VerificationError(.malformed, "no signedPayload") }
            asked = try await verifier.verifyRealtimeRequest(signedPayload, expectedEnvironment: endpoint)
        } catch {
            guard limits.unverified.allow(request.head.clientAddress) else {
                Self.count("rate_limited_unverified")
                throw APIError.rateLimited()
            }
            guard let refusal = error as? VerificationError else {
                Self.count("malformed")
                throw APIError.invalidRequest("the body must be a JSON object with a string signedPayload")
            }
            Self.count(refusal.code.rawValue.lowercased())
            throw NotificationRoutes.httpError(for: refusal)
        }
        guard let requestIdentifier = asked.requestIdentifier.flatMap(UUID.init(uuidString:))?.uuidString.lowercased(),
            let originalTransactionID = asked.originalTransactionId, AppleTransactionID.isValid(originalTransactionID),
            let productID = asked.productId, OrderRoutes.isAcceptableIdentifier(productID, maxLength: 255),
            let userLocale = asked.userLocale, OrderRoutes.isAcceptableIdentifier(userLocale, maxLength: 64),
            let signedDate = asked.signedDate
        else {
            Self.count("malformed")
            throw HTTPError(
                status: 400, code: "MALFORMED",
                message: "requestIdentifier (a UUID), originalTransactionId, productId, userLocale and signedDate are required")
        }
        let environment = asked.rawEnvironment ?? endpoint.rawValue
        let now = clock.now()
        let products = try await catalogue.products(appKey: appKey)
        let product = products.first { $0.productID == productID }
        let owner = try await answers.owner(originalTransactionID: originalTransactionID, environment: environment)
        let subject: RetentionSubject
        if let owner, owner.consentRescinded {
            subject = .consentRescinded
        } else if let owner {
            let chains = OfferRoutes.chains(
                try await subscriptions.subscriptions(userID: owner.userID), inGroupOf: product, products: products)
            subject = .known(chains: chains.map { ($0.activeProductID, $0.pendingProductID, $0.status(at: now)) })
        } else {
            subject = .unknown
        }
        let chosen = RetentionRules.answer(product: product, userLocale: userLocale, subject: subject, canSignOffers: signer != nil)
        guard subject != .consentRescinded else {
            Self.count("consent_rescinded")
            return try response(chosen, productID: productID, transactionID: originalTransactionID, products: products, now: now)
        }
        let (recorded, _) = try await answers.record(
            RetentionShown(
                requestIdentifier: requestIdentifier, environment: environment, originalTransactionID: originalTransactionID,
                userID: owner?.userID, productID: productID, userLocale: userLocale, answer: chosen, signedAt: signedDate,
                answeredAt: now))
        Self.count(recorded.answer.kind.lowercased())
        return try response(recorded.answer, productID: productID, transactionID: originalTransactionID, products: products, now: now)
    }

    /// Apple's RealtimeResponseBody: `message`, `promotionalOffer` (its signature V2 made now for
    /// the subscriber's transaction), `alternateProduct`, or nothing chosen (`{}`), which shows
    /// the default message.
    private func response(
        _ answer: RetentionAnswer, productID: String, transactionID: String, products: [CatalogueProduct], now: Date
    ) throws -> HTTPResponse {
        switch answer {
        case .message(let messageIdentifier):
            return .json(RealtimeResponse(message: .init(messageIdentifier: messageIdentifier)))
        case .promotionalOffer(let messageIdentifier, let offerIdentifier):
            guard let signer else {
                throw APIError.serviceUnavailable("offer signatures are not configured (APPLE_IAP_KEY_ID)")
            }
            let signature = try signer.promotionalOffer(
                productId: productID, offerIdentifier: offerIdentifier, transactionId: transactionID, issuedAt: now, nonce: UUID())
            return .json(
                RealtimeResponse(
                    promotionalOffer: .init(messageIdentifier: messageIdentifier, promotionalOfferSignatureV2: signature)))
        case .alternateProduct(let messageIdentifier, let alternate):
            // The catalogue bills each product one way: MONTHLY names the 12-month commitment
            // billed monthly; left out, Apple offers the product billed up front.
            let plan = products.first { $0.productID == alternate }?.billingPlan
            return .json(
                RealtimeResponse(
                    alternateProduct: .init(
                        messageIdentifier: messageIdentifier, productId: alternate,
                        billingPlanType: plan == .monthly ? BillingPlan.monthly.rawValue : nil)))
        case .none:
            return .json(RealtimeResponse())
        }
    }

    /// Apple's RealtimeResponseBody; its options are mutually exclusive and absent ones are left out.
    struct RealtimeResponse: Encodable {
        struct Message: Encodable {
            let messageIdentifier: String
        }
        struct PromotionalOffer: Encodable {
            let messageIdentifier: String
            let promotionalOfferSignatureV2: String
        }
        struct AlternateProduct: Encodable {
            let messageIdentifier: String
            let productId: String
            var billingPlanType: String?
        }
        var message: Message?
        var promotionalOffer: PromotionalOffer?
        var alternateProduct: AlternateProduct?
    }
}
