import AppStore
import Domain
import Foundation
import Postgres
import ServiceRuntime
import Storage

/// Answers a CONSUMPTION_REQUEST through Send Consumption Information, only for a user who
/// consented (`user_consent`, purpose CONSUMPTION_DATA, granted): no consent, or no record of
/// one, sends nothing. Runs while the worker holds the event's lease, before the event is
/// completed: a network failure fails the attempt retryably (the event's backoff applies); the
/// outcome is recorded once per notification UUID, so a retried or redelivered event never
/// answers twice. A crash between Apple's acknowledgement and that record can repeat the answer
/// once; Apple's PUT replaces the previous answer, so it stays one answer.
struct ConsumptionResponder: Sendable {
    let pool: PostgresPool
    let clients: AppStoreAPIClients?
    let logger: Logger

    init(pool: PostgresPool, clients: AppStoreAPIClients?, logger: Logger) {
        self.pool = pool
        self.clients = clients
        self.logger = logger
    }

    func answer(_ event: ClaimedEvent, _ verified: VerifiedEvent, now: Date) async throws {
        guard case .notification(let uuid, _, _) = event.payload.origin else { return }
        let environment = event.payload.environment
        guard let transaction = verified.transaction else {
            return try await record(uuid, environment: environment, transactionID: nil, user: nil, outcome: "NO_TRANSACTION")
        }
        let fact = transaction.fact
        let rows = try await pool.query(
            """
            WITH who AS (
                SELECT coalesce(
                    (SELECT user_id FROM user_account_token WHERE app_account_token = \(transaction.appAccountTokenUUID)),
                    (SELECT user_id FROM apple_transaction WHERE environment = \(environment) AND transaction_id = \(fact.transactionID)),
                    (SELECT user_id FROM user_subscription
                      WHERE environment = \(environment) AND original_transaction_id = \(fact.originalTransactionID))) AS user_id
            )
            SELECT json_build_object(
                'answered', EXISTS (SELECT 1 FROM consumption_answer WHERE notification_uuid = \(uuid)),
                'userID', who.user_id,
                'consent', (SELECT granted FROM user_consent WHERE user_id = who.user_id AND purpose = 'CONSUMPTION_DATA'),
                'accountCreated', (SELECT epoch_ms(created_at) FROM app_user WHERE user_id = who.user_id),
                'token', (SELECT app_account_token FROM user_account_token WHERE user_id = who.user_id),
                'granted', (SELECT sum(amount) FROM credit_grant
                             WHERE environment = \(environment) AND transaction_id = \(fact.transactionID)),
                'poolBalance', (SELECT balance FROM credit_account WHERE user_id = who.user_id AND pool = 'SUBSCRIPTION'),
                'hadFreeTrial', EXISTS (SELECT 1 FROM apple_transaction
                                         WHERE environment = \(environment)
                                           AND original_transaction_id = \(fact.originalTransactionID)
                                           AND offer_type = 1 AND offer_discount_type = 'FREE_TRIAL'),
                'fulfilled', EXISTS (SELECT 1 FROM payment_order
                                      WHERE channel = 'APPLE' AND environment = \(environment)
                                        AND transaction_id = \(fact.transactionID) AND status = 'FULFILLED')
            ) AS loaded
              FROM who
            """)
        let loaded = try FulfillmentStore.decode(Loaded.self, json: try rows.first!.decode("loaded", as: String.self))
        if loaded.answered { return }
        guard let consent = loaded.consent else {
            return try await record(
                uuid, environment: environment, transactionID: fact.transactionID, user: loaded.userID, outcome: "CONSENT_UNKNOWN")
        }
        guard consent else {
            return try await record(uuid, environment: environment, transactionID: fact.transactionID, user: loaded.userID, outcome: "NO_CONSENT")
        }
        guard let client = clients?.client(for: environment) else {
            return try await record(
                uuid, environment: environment, transactionID: fact.transactionID, user: loaded.userID, outcome: "API_NOT_CONFIGURED")
        }
        let request = ConsumptionReport.request(
            ConsumptionFacts(
                granted: loaded.granted, poolBalance: loaded.poolBalance ?? 0, hadFreeTrial: loaded.hadFreeTrial,
                delivered: (loaded.granted ?? 0) > 0 || loaded.fulfilled, accountCreated: loaded.accountCreated,
                appAccountToken: transaction.appAccountTokenUUID ?? loaded.token),
            now: now)
        let body = String(decoding: try AppStoreJSON.encoder().encode(request), as: UTF8.self)
        do {
            try await client.sendConsumptionData(transactionId: fact.transactionID, request)
        } catch  where error.isRetryable {
            throw ProcessingFailure.retryable(code: "RETRYABLE_NETWORK", message: error.description)
        } catch {
            logger.error("Apple refused the consumption information", ["error": .string(error.description)])
            return try await record(
                uuid, environment: environment, transactionID: fact.transactionID, user: loaded.userID, outcome: "REFUSED",
                request: body, error: error.description)
        }
        try await record(uuid, environment: environment, transactionID: fact.transactionID, user: loaded.userID, outcome: "SENT", request: body)
    }

    private struct Loaded: Decodable {
        var answered: Bool
        var userID: String?
        var consent: Bool?
        var accountCreated: Date?
        var token: UUID?
        var granted: Int64?
        var poolBalance: Int64?
        var hadFreeTrial: Bool
        var fulfilled: Bool
    }

    private func record(
        _ uuid: String, environment: String, transactionID: String?, user: String?, outcome: String, request: String? = nil,
        error: String? = nil
    ) async throws {
        try await pool.query(
            """
            INSERT INTO consumption_answer (notification_uuid, environment, transaction_id, user_id, outcome, request, error_message)
            VALUES (\(uuid), \(environment), \(transactionID), \(user), \(outcome), \(request)::jsonb, \(error))
            ON CONFLICT (notification_uuid) DO NOTHING
            """)
        MetricsRegistry.shared.counter(
            "subs_consumption_answers_total", help: "CONSUMPTION_REQUEST notifications by outcome (SENT only with consent)",
            labels: ["outcome": outcome]
        ).increment()
        logger.info(
            "consumption request handled",
            ["appstore.notification_uuid": .string(uuid), "consumption.outcome": .string(outcome)])
    }
}
