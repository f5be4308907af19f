import Domain
import Foundation
import Postgres

/// What we answered one of Apple's Get Retention Message requests, as the record keeps it.
public struct RetentionShown: Sendable, Equatable {
    /// Apple's `requestIdentifier` (lowercase UUID).
    public var requestIdentifier: String
    public var environment: String
    public var originalTransactionID: String
    /// Nil when the chain is not bound to a user of ours.
    public var userID: String?
    public var productID: String
    public var userLocale: String
    public var answer: RetentionAnswer
    /// Apple's `signedDate` of the request.
    public var signedAt: Date
    public var answeredAt: Date

    public init(
        requestIdentifier: String, environment: String, originalTransactionID: String, userID: String?, productID: String,
        userLocale: String, answer: RetentionAnswer, signedAt: Date, answeredAt: Date
    ) {
        self.requestIdentifier = requestIdentifier
        self.environment = environment
        self.originalTransactionID = originalTransactionID
        self.userID = userID
        self.productID = productID
        self.userLocale = userLocale
        self.answer = answer
        self.signedAt = signedAt
        self.answeredAt = answeredAt
    }
}

/// The user behind a chain, as the retention answer may consider them.
public struct RetentionChainOwner: Sendable, Equatable {
    public var userID: String
    /// A parent withdrew consent (RESCIND_CONSENT): nothing personal is used or kept.
    public var consentRescinded: Bool
}

/// The record of retention answers (`retention_message_answer`): what Apple was told to show whom.
public struct RetentionMessageStore: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// The user owning the chain (the purchaser before a family member), nil for a chain not ours.
    public func owner(originalTransactionID: String, environment: String) async throws -> RetentionChainOwner? {
        try await pool.query(
            """
            SELECT s.user_id, u.consent_rescinded_at IS NOT NULL AS rescinded
              FROM user_subscription s JOIN app_user u ON u.user_id = s.user_id
             WHERE s.environment = \(environment) AND s.original_transaction_id = \(originalTransactionID)
             ORDER BY s.is_family_shared, s.id LIMIT 1
            """
        ).first.map { RetentionChainOwner(userID: try $0.decode("user_id"), consentRescinded: try $0.decode("rescinded")) }
    }

    /// Keeps `shown` unless its request was answered before; returns what the request was first
    /// answered, so Apple's retry of a request shows the same message and is counted once.
    public func record(_ shown: RetentionShown) async throws -> (recorded: RetentionShown, isNew: Bool) {
        let (message, offer, alternate): (String?, String?, String?) =
            switch shown.answer {
            case .message(let message): (message, nil, nil)
            case .promotionalOffer(let message, let offer): (message, offer, nil)
            case .alternateProduct(let message, let product): (message, nil, product)
            case .none: (nil, nil, nil)
            }
        let inserted = try await pool.query(
            """
            INSERT INTO retention_message_answer (request_identifier, environment, original_transaction_id, user_id, product_id,
                user_locale, answer, message_identifier, offer_identifier, alternate_product_id, signed_at, answered_at)
            VALUES (\(shown.requestIdentifier)::uuid, \(shown.environment), \(shown.originalTransactionID), \(shown.userID),
                \(shown.productID), \(shown.userLocale), \(shown.answer.kind), \(message)::uuid, \(offer), \(alternate),
                \(shown.signedAt), \(shown.answeredAt))
            ON CONFLICT (request_identifier) DO NOTHING
            RETURNING request_identifier
            """)
        if !inserted.isEmpty { return (shown, true) }
        guard let first = try await answer(requestIdentifier: shown.requestIdentifier) else {
            throw PostgresError.decoding(column: "request_identifier", reason: "a conflicting answer that cannot be read back")
        }
        return (first, false)
    }

    /// The answer recorded for a request, nil when none was.
    public func answer(requestIdentifier: String) async throws -> RetentionShown? {
        try await pool.query(
            """
            SELECT request_identifier::text AS request_identifier, environment, original_transaction_id, user_id, product_id,
                   user_locale, answer, message_identifier::text AS message_identifier, offer_identifier, alternate_product_id,
                   signed_at, answered_at
              FROM retention_message_answer WHERE request_identifier = \(requestIdentifier)::uuid
            """
        ).first.map(Self.shown)
    }

    /// The answers recorded for a chain, the newest first.
    public func answers(originalTransactionID: String, environment: String, limit: Int = 100) async throws -> [RetentionShown] {
        try await pool.query(
            """
            SELECT request_identifier::text AS request_identifier, environment, original_transaction_id, user_id, product_id,
                   user_locale, answer, message_identifier::text AS message_identifier, offer_identifier, alternate_product_id,
                   signed_at, answered_at
              FROM retention_message_answer
             WHERE environment = \(environment) AND original_transaction_id = \(originalTransactionID)
             ORDER BY answered_at DESC LIMIT \(limit)
            """
        ).map(Self.shown)
    }

    private static func shown(_ row: PostgresRow) throws -> RetentionShown {
        let message: String? = try row.decode("message_identifier")
        let offer: String? = try row.decode("offer_identifier")
        let alternate: String? = try row.decode("alternate_product_id")
        let answer: RetentionAnswer =
            if let message, let offer {
                .promotionalOffer(messageIdentifier: message, offerIdentifier: offer)
            } else if let message, let alternate {
                .alternateProduct(messageIdentifier: message, productId: alternate)
            } else if let message {
                .message(messageIdentifier: message)
            } else {
                .none
            }
        return RetentionShown(
            requestIdentifier: try row.decode("request_identifier"), environment: try row.decode("environment"),
            originalTransactionID: try row.decode("original_transaction_id"), userID: try row.decode("user_id"),
            productID: try row.decode("product_id"), userLocale: try row.decode("user_locale"), answer: answer,
            signedAt: try row.decode("signed_at"), answeredAt: try row.decode("answered_at"))
    }
}
