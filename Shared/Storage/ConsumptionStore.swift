import Domain
import Foundation
import Postgres

/// What became of one CONSUMPTION_REQUEST (`consumption_answer.outcome`).
public enum ConsumptionOutcome: String, Sendable, StoredStatus {
    case sent = "SENT"
    case noConsent = "NO_CONSENT"
    case consentUnknown = "CONSENT_UNKNOWN"
    case noTransaction = "NO_TRANSACTION"
    case apiNotConfigured = "API_NOT_CONFIGURED"
    case refused = "REFUSED"
}

/// What an answer to a CONSUMPTION_REQUEST is made of, read in one query.
public struct StoredConsumptionFacts: Sendable {
    /// An answer was recorded already (a retried or redelivered event).
    public var answered: Bool
    /// Who the transaction belongs to: by its token, else by the stored transaction, else the chain.
    public var userID: String?
    /// The user's CONSUMPTION_DATA choice; nil when none is recorded.
    public var consent: Bool?
    public var accountCreated: Date?
    public var token: UUID?
    /// Credits granted for the transaction.
    public var granted: Int64?
    /// What usage burned of the transaction's lots (not what a refund or a clearing took).
    public var used: Int64?
    public var hadFreeTrial: Bool
    /// The transaction's order is FULFILLED.
    public var fulfilled: Bool
    /// The catalogue's refund preference for the transaction's product.
    public var refundPreference: RefundPreference?
}

/// The SQL of consumption requests: the facts an answer needs, and the one answer per notification.
public struct ConsumptionStore: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) {
        self.pool = pool
    }

    /// The facts about a transaction and its user that an answer may report.
    public func facts(
        notificationUUID: String, environment: String, transactionID: String, originalTransactionID: String,
        productID: String, appAccountToken: UUID?
    ) async throws -> StoredConsumptionFacts {
        let row = try await pool.query(
            """
            WITH who AS (
                SELECT coalesce(
                    (SELECT user_id FROM user_account_token WHERE app_account_token = \(appAccountToken)),
                    (SELECT user_id FROM apple_transaction WHERE environment = \(environment) AND transaction_id = \(transactionID)),
                    (SELECT user_id FROM user_subscription
                      WHERE environment = \(environment) AND original_transaction_id = \(originalTransactionID))) AS user_id
            )
            SELECT EXISTS (SELECT 1 FROM consumption_answer WHERE notification_uuid = \(notificationUUID)) AS answered,
                   who.user_id,
                   (SELECT granted FROM user_consent WHERE user_id = who.user_id AND purpose = 'CONSUMPTION_DATA') AS consent,
                   (SELECT epoch_ms(created_at) FROM app_user WHERE user_id = who.user_id) AS account_created_ms,
                   (SELECT app_account_token FROM user_account_token WHERE user_id = who.user_id) AS token,
                   (SELECT least(sum(amount), 9223372036854775807)::bigint FROM credit_grant
                     WHERE environment = \(environment) AND transaction_id = \(transactionID)) AS granted,
                   (SELECT least(sum(greatest(0, amount - remaining - revoked_amount - cleared_amount)), 9223372036854775807)::bigint FROM credit_grant
                     WHERE environment = \(environment) AND transaction_id = \(transactionID)) AS used,
                   EXISTS (SELECT 1 FROM apple_transaction
                            WHERE environment = \(environment) AND original_transaction_id = \(originalTransactionID)
                              AND offer_type = 1 AND offer_discount_type = 'FREE_TRIAL') AS had_free_trial,
                   EXISTS (SELECT 1 FROM payment_order
                            WHERE channel = 'APPLE' AND environment = \(environment)
                              AND transaction_id = \(transactionID) AND status = 'FULFILLED') AS fulfilled,
                   (SELECT refund_preference FROM payment_product
                     WHERE channel = 'APPLE' AND product_id = \(productID) AND NOT deleted LIMIT 1) AS refund_preference
              FROM who
            """
        ).single()
        return StoredConsumptionFacts(
            answered: try row.decode("answered"), userID: try row.decode("user_id", as: String?.self),
            consent: try row.decode("consent", as: Bool?.self),
            accountCreated: try row.decode("account_created_ms", as: Int64?.self).map {
                Date(timeIntervalSince1970: Double($0) / 1000)
            },
            token: try row.decode("token", as: UUID?.self), granted: try row.decode("granted", as: Int64?.self),
            used: try row.decode("used", as: Int64?.self), hadFreeTrial: try row.decode("had_free_trial"),
            fulfilled: try row.decode("fulfilled"),
            refundPreference: try row.decode("refund_preference", as: String?.self).flatMap(RefundPreference.init(rawValue:)))
    }

    /// Records the answer (or why there is none); a notification keeps its first answer.
    public func record(
        notificationUUID: String, environment: String, transactionID: String?, userID: String?,
        outcome: ConsumptionOutcome, request: String?, error: String?
    ) async throws {
        try await pool.query(
            """
            INSERT INTO consumption_answer (notification_uuid, environment, transaction_id, user_id, outcome, request, error_message)
            VALUES (\(notificationUUID), \(environment), \(transactionID), \(userID), \(outcome), \(request)::jsonb, \(error))
            ON CONFLICT (notification_uuid) DO NOTHING
            """)
    }
}
