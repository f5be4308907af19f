import AppStore
import Catalogue
import Domain
import Foundation
import HTTPServer
import ServiceRuntime
import Storage

/// The signatures StoreKit's purchase options need from our server: a promotional offer
/// signature V2 or an introductory offer eligibility, signed with the App Store key for the
/// caller, when the catalogue's rules allow it, audited, and within the user's budget.
struct OfferRoutes: Sendable {
    let catalogue: CatalogueStore
    let subscriptions: SubscriptionStore
    let signatures: OfferSignatureStore
    /// Nil when the App Store key is not configured.
    let signer: StoreKitRequestSigner?
    /// Per user id.
    let limiter: RateLimiter
    /// Seconds a refused user waits for the next token.
    let retryAfterSeconds: Int
    let appKey: String
    let clock: any WallClock

    init(
        catalogue: CatalogueStore, subscriptions: SubscriptionStore, signatures: OfferSignatureStore,
        signer: StoreKitRequestSigner?, ratePerMinute: Int, burst: Int, appKey: String, clock: any WallClock
    ) {
        self.catalogue = catalogue
        self.subscriptions = subscriptions
        self.signatures = signatures
        self.signer = signer
        limiter = RateLimiter(ratePerSecond: Double(ratePerMinute) / 60, burst: Double(burst))
        retryAfterSeconds = (60 + ratePerMinute - 1) / ratePerMinute
        self.appKey = appKey
        self.clock = clock
    }

    static let path = "subscriptions/offers/signature"

    func register(in api: inout RouterGroup<IngressRequestContext>) {
        api.post(Self.path) { request, context in try await sign(request, user: try context.requireUser()) }
    }

    struct SignatureRequest: Decodable {
        let productId: String
        let offerIdentifier: String?
        /// A string, so a value outside the two kinds gets a message naming them.
        let kind: String
        /// StoreKit's `AppTransaction.appTransactionID`, for a user we know no transaction of.
        let appTransactionId: String?
    }

    /// The signature and what it says; fields without a value are written as null.
    struct SignatureView: Encodable {
        let kind: OfferSignatureKind
        let productId: String
        @ExplicitNull var offerIdentifier: String?
        @ExplicitNull var allowIntroductoryOffer: Bool?
        @ExplicitNull var transactionId: String?
        /// The compact JWS to pass to StoreKit's purchase option.
        let jws: String
        let keyId: String
        let nonce: String
        let signedAt: Date
    }

    func sign(_ request: HTTPRequest, user: AuthenticatedUser) async throws -> HTTPResponse {
        guard let signer else {
            throw HTTPError(
                status: 503, code: "OFFER_SIGNING_UNAVAILABLE",
                message: "offer signatures are not configured (APPLE_IAP_ISSUER_ID, APPLE_IAP_KEY_ID, APPLE_IAP_PRIVATE_KEY_PATH)")
        }
        // Charged before any work, so invalid requests spend the budget too.
        guard limiter.allow(user.userID) else {
            throw HTTPError(
                status: 429, code: "RATE_LIMITED", message: "too many offer signatures for this user; retry later",
                headers: [("Retry-After", String(retryAfterSeconds))])
        }
        let body = try request.decodeJSON(SignatureRequest.self)
        guard let kind = OfferSignatureKind(rawValue: body.kind) else {
            throw APIError.invalidRequest("kind must be PROMOTIONAL or INTRODUCTORY_ELIGIBILITY")
        }
        guard OrderRoutes.isAcceptableIdentifier(body.productId, maxLength: 255) else {
            throw APIError.invalidRequest("productId is required (at most 255 printable characters)")
        }
        if let offer = body.offerIdentifier, !OrderRoutes.isAcceptableIdentifier(offer, maxLength: 255) {
            throw APIError.invalidRequest("offerIdentifier must be at most 255 printable characters")
        }
        if kind == .promotional && body.offerIdentifier == nil {
            throw APIError.invalidRequest("offerIdentifier is required for a PROMOTIONAL signature")
        }
        if kind == .introductoryEligibility && body.offerIdentifier != nil {
            throw APIError.invalidRequest("offerIdentifier is for PROMOTIONAL signatures only")
        }
        if let given = body.appTransactionId, !AppleTransactionID.isValid(given) {
            throw APIError.invalidRequest("appTransactionId must be Apple's decimal transaction id")
        }

        let now = clock.now()
        let products = try await catalogue.products(appKey: appKey)
        let product = products.first { $0.productID == body.productId }
        let chains = try await subscriptions.subscriptions(userID: user.userID)
        let inGroup = Self.chains(chains, inGroupOf: product, products: products)
        let standing = GroupStanding(statuses: inGroup.map { $0.status(at: now) })
        let decision = OfferRules.decide(product: product, kind: kind, offerIdentifier: body.offerIdentifier, standing: standing)
        // Apple checks that the transaction belongs to the buyer's Apple Account: the one the app
        // names first, else the user's chain in the group, else any chain of the user.
        let transactionID = body.appTransactionId ?? (inGroup.first ?? chains.first)?.originalTransactionID
        let nonce = UUID()
        let jws: String
        var record = OfferSignatureRecord(
            userID: user.userID, productID: body.productId, kind: kind, offerIdentifier: nil, allowIntroductoryOffer: nil,
            transactionID: transactionID, keyID: signer.keyId, nonce: nonce, signedAt: now)
        switch decision {
        case .unknownProduct:
            throw APIError.productUnavailable("\(body.productId) is not an enabled subscription of the catalogue")
        case .unknownOffer:
            throw HTTPError(
                status: 422, code: "OFFER_UNAVAILABLE",
                message: kind == .promotional
                    ? "the catalogue has no offer \(body.offerIdentifier ?? "") for \(body.productId)"
                    : "the catalogue has no introductory offer for \(body.productId)")
        case .notEligible(let audience, let standing):
            throw HTTPError(
                status: 403, code: "OFFER_NOT_ELIGIBLE",
                message: "offer \(body.offerIdentifier ?? "") is for \(audience.rawValue) users; this user is \(standing.rawValue) in the group")
        case .promotional(let offerIdentifier):
            record.offerIdentifier = offerIdentifier
            jws = try signer.promotionalOffer(
                productId: body.productId, offerIdentifier: offerIdentifier, transactionId: transactionID, issuedAt: now, nonce: nonce)
        case .introductory(let allowed):
            guard let transactionID else {
                throw HTTPError(
                    status: 422, code: "APP_TRANSACTION_REQUIRED",
                    message: "no transaction of this user is known: send appTransactionId (StoreKit's AppTransaction.appTransactionID)")
            }
            record.allowIntroductoryOffer = allowed
            jws = try signer.introductoryOfferEligibility(
                productId: body.productId, allowIntroductoryOffer: allowed, transactionId: transactionID, issuedAt: now, nonce: nonce)
        }
        try await signatures.record(record)
        return .json(
            SignatureView(
                kind: kind, productId: body.productId, offerIdentifier: record.offerIdentifier,
                allowIntroductoryOffer: record.allowIntroductoryOffer, transactionId: transactionID, jws: jws, keyId: signer.keyId,
                nonce: nonce.uuidString.lowercased(), signedAt: now))
    }

    /// The user's `chains` in `product`'s subscription group (a chain stored without its group is
    /// placed by its product), the ones an offer's audience is judged on.
    static func chains(_ chains: [UserSubscription], inGroupOf product: CatalogueProduct?, products: [CatalogueProduct]) -> [UserSubscription] {
        let groups = Dictionary(products.map { ($0.productID, $0.subscriptionGroupID) }, uniquingKeysWith: { first, _ in first })
        return chains.filter { ($0.subscriptionGroupID ?? groups[$0.activeProductID]) == product?.subscriptionGroupID }
    }
}
