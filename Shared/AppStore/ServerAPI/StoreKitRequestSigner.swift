import Crypto
import Foundation

/// Signs the JWS that StoreKit's purchase options carry (Apple's "Generating JWS to sign App
/// Store requests"): the promotional offer signature V2 and the introductory offer eligibility,
/// with the App Store Connect in-app purchase key that also signs the Server API's tokens.
///
/// Header `{"alg":"ES256","kid":…,"typ":"JWT"}`; claims `iss` (issuer id), `bid` (bundle id),
/// `aud` (the feature: `promotional-offer`, `introductory-offer-eligibility`), `iat` (seconds),
/// `nonce` (a lowercase UUID, once per signature) and the feature's own: `productId`,
/// `offerIdentifier`, `transactionId`, `allowIntroductoryOffer` — the names and values Apple's
/// App Store Server Library (`jws_signature_creator`) writes.
public struct StoreKitRequestSigner: Sendable {
    private let issuerId: String
    /// The key's id, the JWS header's `kid`.
    public let keyId: String
    private let bundleId: String
    private let key: P256PrivateKey

    public init(configuration: AppStoreServerAPIConfiguration) {
        issuerId = configuration.issuerId
        keyId = configuration.keyId
        bundleId = configuration.bundleId
        key = configuration.signingKey
    }

    /// A promotional offer signature V2 for `offerIdentifier` of `productId`; `transactionId`
    /// (any transaction of the customer's Apple Account) is optional for Apple but recommended.
    public func promotionalOffer(
        productId: String, offerIdentifier: String, transactionId: String?, issuedAt: Date, nonce: UUID
    ) throws(CryptoError) -> String {
        try sign(
            audience: "promotional-offer", issuedAt: issuedAt, nonce: nonce, productId: productId,
            offerIdentifier: offerIdentifier, transactionId: transactionId, allowIntroductoryOffer: nil)
    }

    /// An introductory offer eligibility signature: whether Apple applies `productId`'s
    /// introductory offer to the customer of `transactionId` (required by Apple here).
    public func introductoryOfferEligibility(
        productId: String, allowIntroductoryOffer: Bool, transactionId: String, issuedAt: Date, nonce: UUID
    ) throws(CryptoError) -> String {
        try sign(
            audience: "introductory-offer-eligibility", issuedAt: issuedAt, nonce: nonce, productId: productId,
            offerIdentifier: nil, transactionId: transactionId, allowIntroductoryOffer: allowIntroductoryOffer)
    }

    /// The common claims and the feature's; a nil one is left out of the JSON.
    private struct Claims: Encodable {
        let iss: String
        let bid: String
        let aud: String
        let iat: Int64
        let nonce: String
        let productId: String
        let offerIdentifier: String?
        let transactionId: String?
        let allowIntroductoryOffer: Bool?
    }

    private func sign(
        audience: String, issuedAt: Date, nonce: UUID, productId: String, offerIdentifier: String?, transactionId: String?,
        allowIntroductoryOffer: Bool?
    ) throws(CryptoError) -> String {
        // Apple's libraries write the nonce as a lowercase UUID and iat in whole seconds.
        let claims = Claims(
            iss: issuerId, bid: bundleId, aud: audience, iat: Int64(issuedAt.timeIntervalSince1970.rounded(.down)),
            nonce: nonce.uuidString.lowercased(), productId: productId, offerIdentifier: offerIdentifier,
            transactionId: transactionId, allowIntroductoryOffer: allowIntroductoryOffer)
        return try AppStoreJWS.sign(claims, keyId: keyId, key: key)
    }
}

/// The compact JWS Apple's App Store APIs take from us, signed with the in-app purchase key:
/// header `{"alg":"ES256","kid":…,"typ":"JWT"}`, the claims as JSON with sorted keys.
enum AppStoreJWS {
    private struct Header: Encodable {
        let alg = "ES256"
        let kid: String
        let typ = "JWT"
    }

    static func sign(_ claims: some Encodable, keyId: String, key: P256PrivateKey) throws(CryptoError) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let header: Data
        let payload: Data
        do {
            header = try encoder.encode(Header(kid: keyId))
            payload = try encoder.encode(claims)
        } catch {
            throw CryptoError(.internalFailure, "cannot encode the JWS: \(error)")
        }
        let signingInput = Base64URL.encode(header) + "." + Base64URL.encode(payload)
        return signingInput + "." + Base64URL.encode(try key.signature(for: Array(signingInput.utf8)))
    }
}
