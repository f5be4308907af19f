import Domain
import Foundation
import Postgres

/// One offer signature handed to a user, as the audit keeps it.
public struct OfferSignatureRecord: Sendable, Equatable {
    public var userID: String
    public var productID: String
    public var kind: OfferSignatureKind
    /// The promotional offer signed (nil for an introductory eligibility).
    public var offerIdentifier: String?
    /// The introductory eligibility signed (nil for a promotional offer).
    public var allowIntroductoryOffer: Bool?
    /// The JWS's `transactionId`, when it carries one.
    public var transactionID: String?
    /// The App Store key that signed (`kid`).
    public var keyID: String
    /// The JWS's `nonce`.
    public var nonce: UUID
    public var signedAt: Date

    public init(
        userID: String, productID: String, kind: OfferSignatureKind, offerIdentifier: String?, allowIntroductoryOffer: Bool?,
        transactionID: String?, keyID: String, nonce: UUID, signedAt: Date
    ) {
        self.userID = userID
        self.productID = productID
        self.kind = kind
        self.offerIdentifier = offerIdentifier
        self.allowIntroductoryOffer = allowIntroductoryOffer
        self.transactionID = transactionID
        self.keyID = keyID
        self.nonce = nonce
        self.signedAt = signedAt
    }
}

/// The audit of offer signatures (`offer_signature`): what was signed for whom.
public struct OfferSignatureStore: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Keeps `record`; the signature is handed out only after this commits, so none escapes the audit.
    public func record(_ record: OfferSignatureRecord) async throws {
        try await pool.query(
            """
            INSERT INTO offer_signature (user_id, product_id, kind, offer_identifier, allow_introductory_offer, transaction_id,
                key_id, nonce, signed_at)
            VALUES (\(record.userID), \(record.productID), \(record.kind.rawValue), \(record.offerIdentifier),
                \(record.allowIntroductoryOffer), \(record.transactionID), \(record.keyID), \(record.nonce.uuidString)::uuid,
                \(record.signedAt))
            """)
    }

    /// The user's signatures, the newest first.
    public func signatures(userID: String, limit: Int = 100) async throws -> [OfferSignatureRecord] {
        try await pool.query(
            """
            SELECT user_id, product_id, kind, offer_identifier, allow_introductory_offer, transaction_id, key_id,
                nonce::text AS nonce, signed_at
            FROM offer_signature WHERE user_id = \(userID) ORDER BY signed_at DESC, id DESC LIMIT \(limit)
            """
        ).map { row in
            let kind: String = try row.decode("kind")
            let nonce: String = try row.decode("nonce")
            guard let kind = OfferSignatureKind(rawValue: kind), let nonce = UUID(uuidString: nonce) else {
                throw PostgresError.decoding(column: "kind/nonce", reason: "a value the domain does not know")
            }
            return OfferSignatureRecord(
                userID: try row.decode("user_id"), productID: try row.decode("product_id"), kind: kind,
                offerIdentifier: try row.decode("offer_identifier"), allowIntroductoryOffer: try row.decode("allow_introductory_offer"),
                transactionID: try row.decode("transaction_id"), keyID: try row.decode("key_id"), nonce: nonce,
                signedAt: try row.decode("signed_at"))
        }
    }
}
