import AppStore
import Domain
import Foundation
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
    let store: ConsumptionStore
    let clients: AppStoreAPIClients?
    let logger: Logger

    init(store: ConsumptionStore, clients: AppStoreAPIClients?, logger: Logger) {
        self.store = store
        self.clients = clients
        self.logger = logger
    }

    func answer(_ event: ClaimedEvent, _ verified: VerifiedEvent, now: Date) async throws {
        guard case .notification(let uuid, _, _) = event.payload.origin else { return }
        let environment = event.payload.environment
        guard let transaction = verified.transaction else {
            return try await record(uuid, environment: environment, transactionID: nil, user: nil, outcome: .noTransaction)
        }
        let fact = transaction.fact
        let loaded = try await store.facts(
            notificationUUID: uuid, environment: environment, transactionID: fact.transactionID,
            originalTransactionID: fact.originalTransactionID, productID: fact.productID,
            appAccountToken: transaction.appAccountTokenUUID)
        if loaded.answered { return }
        guard let consent = loaded.consent else {
            return try await record(
                uuid, environment: environment, transactionID: fact.transactionID, user: loaded.userID, outcome: .consentUnknown)
        }
        guard consent else {
            return try await record(uuid, environment: environment, transactionID: fact.transactionID, user: loaded.userID, outcome: .noConsent)
        }
        guard let client = clients?.client(for: environment) else {
            return try await record(
                uuid, environment: environment, transactionID: fact.transactionID, user: loaded.userID, outcome: .apiNotConfigured)
        }
        let request = ConsumptionReport.request(
            ConsumptionFacts(
                granted: loaded.granted, used: loaded.used ?? 0, hadFreeTrial: loaded.hadFreeTrial,
                delivered: (loaded.granted ?? 0) > 0 || loaded.fulfilled, accountCreated: loaded.accountCreated,
                appAccountToken: transaction.appAccountTokenUUID ?? loaded.token, refundPreference: loaded.refundPreference))
        let body = String(decoding: try AppStoreJSON.encoder().encode(request), as: UTF8.self)
        do {
            try await client.sendConsumptionInformation(transactionId: fact.transactionID, request)
        } catch  where error.isRetryable {
            throw ProcessingFailure.retryable(code: "RETRYABLE_NETWORK", message: error.description)
        } catch {
            logger.error("Apple refused the consumption information", ["error": .string(error.description)])
            return try await record(
                uuid, environment: environment, transactionID: fact.transactionID, user: loaded.userID, outcome: .refused,
                request: body, error: error.description)
        }
        try await record(uuid, environment: environment, transactionID: fact.transactionID, user: loaded.userID, outcome: .sent, request: body)
    }

    private func record(
        _ uuid: String, environment: String, transactionID: String?, user: String?, outcome: ConsumptionOutcome,
        request: String? = nil, error: String? = nil
    ) async throws {
        try await store.record(
            notificationUUID: uuid, environment: environment, transactionID: transactionID, userID: user, outcome: outcome,
            request: request, error: error)
        MetricsRegistry.shared.counter(
            "subs_consumption_answers_total", help: "CONSUMPTION_REQUEST notifications by outcome (SENT only with consent)",
            labels: ["outcome": outcome.rawValue]
        ).increment()
        logger.info(
            "consumption request handled",
            ["appstore.notification_uuid": .string(uuid), "consumption.outcome": .string(outcome.rawValue)])
    }
}
