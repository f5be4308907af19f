import AppStore
import Crypto
import Domain
import Foundation
import Pipeline
import Postgres
import ServiceRuntime
import Storage

/// Re-projects a chain from Apple's own answer: Get All Subscription Statuses, each returned
/// subscription (signed transaction and renewal info) stored as a `STATUS_REQUERY` event. Workers
/// apply it like any notification: the nested JWS verified, the facts stored under their unique
/// keys (a known transaction changes nothing, a missed one gets its order and grant), the chain
/// recomputed, in order with the chain's other events (same routing key).
///
/// The event's outer envelope is ours, not Apple's, and carries no signature: it is sealed with
/// the payload key like every stored payload, which is what proves a worker wrote it.
struct ChainRequery: Sendable {
    let events: EventStore
    let publisher: EventPublisher
    let cipher: PayloadCipher
    let clients: AppStoreAPIClients
    let bundleID: String
    let logger: Logger

    func run(_ task: ClaimedTask, originalTransactionID: String) async throws(TaskFailure) -> TaskResult {
        guard let client = clients.client(for: task.environment) else {
            throw .permanent(code: "ENVIRONMENT_NOT_SERVED", message: "this deployment does not serve \(task.environment)")
        }
        let answer: StatusResponse
        do {
            answer = try await client.getAllSubscriptionStatuses(transactionId: originalTransactionID)
        } catch {
            throw Scheduler.failure(error)
        }
        guard answer.rawEnvironment == task.environment else {
            throw .permanent(
                code: "INVALID_ENVIRONMENT", message: "Apple answered for \(answer.rawEnvironment ?? "no environment")")
        }
        var result = task.result
        var outbox: [OutboxEntry] = []
        let items = (answer.data ?? []).flatMap { $0.lastTransactions ?? [] }
        result.fetched = items.count
        for item in items where item.signedTransactionInfo != nil || item.signedRenewalInfo != nil {
            let chain = item.originalTransactionId ?? originalTransactionID
            let uuid = "requery-\(task.id)-\(chain)"
            let event: NewNotificationEvent
            do {
                event = try NewNotificationEvent.sealing(
                    signedPayload: Self.envelope(item, uuid: uuid, environment: task.environment, bundleID: bundleID),
                    notificationUUID: uuid, type: NotificationMatrix.statusRequery, subtype: nil,
                    environment: task.environment, signedDate: Date(), signedTransactionInfo: item.signedTransactionInfo,
                    cipher: cipher, traceID: "requery-\(task.id)")
            } catch {
                throw .permanent(code: "SEAL_FAILED", message: "Apple's answer could not be sealed: \(error)")
            }
            do {
                let stored = try await events.insertNotification(event, publishGrace: .seconds(5))
                result.eventIDs.append(stored.eventID)
                if let entry = stored.outbox {
                    result.stored += 1
                    outbox.append(entry)
                } else {
                    result.duplicates += 1
                }
            } catch let error as PostgresError where !error.isRetryable {
                throw .permanent(code: "DATABASE_REFUSED", message: "\(error)")
            } catch {
                throw .retryable(code: "RETRYABLE_DATABASE", message: "\(error)")
            }
        }
        await publisher.publish(outbox)
        logger.info(
            "chain re-queried from Apple",
            [
                "appstore.original_transaction_id": .string(originalTransactionID), "appstore.environment": .string(task.environment),
                "requery.subscriptions": .int(Int64(result.fetched)), "requery.events_stored": .int(Int64(result.stored)),
            ])
        return result
    }

    /// A notification-shaped envelope (`alg: none`, empty signature) around Apple's signed answer,
    /// so the worker's reader takes it like a notification and verifies the nested JWS.
    static func envelope(_ item: LastTransactionsItem, uuid: String, environment: String, bundleID: String) throws -> String {
        var data = NotificationData()
        data.rawEnvironment = environment
        data.bundleId = bundleID
        data.signedTransactionInfo = item.signedTransactionInfo
        data.signedRenewalInfo = item.signedRenewalInfo
        data.rawStatus = item.rawStatus
        var payload = ResponseBodyV2DecodedPayload()
        payload.rawNotificationType = NotificationMatrix.statusRequery
        payload.notificationUUID = uuid
        payload.version = "2.0"
        payload.signedDate = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 * 1000).rounded(.down) / 1000)
        payload.data = data
        let header = Base64URL.encode(Array(#"{"alg":"none"}"#.utf8))
        return header + "." + Base64URL.encode(Array(try AppStoreJSON.encoder().encode(payload))) + "."
    }

    /// Flags the chains whose stored facts disagree, looking at the renewal infos changed within
    /// `window`. A chain disagrees when its newest renewal info was signed after the transaction
    /// the projection calls current (`user_subscription.last_transaction_id`) and either names
    /// another current product (an upgrade or crossgrade transaction never arrived) or renews
    /// more than a minute after that transaction expires without being in billing retry (a
    /// renewal transaction never arrived).
    /// Frozen chains and revoked current transactions are left alone; a chain re-queried within
    /// `cooldown` is not flagged again. Returns the chains flagged.
    static func flagDisagreeingChains(
        pool: PostgresPool, environments: [String], window: Duration, cooldown: Duration, requestedBy: String
    ) async throws -> [String] {
        let rows = try await pool.query(
            """
            INSERT INTO fulfillment_task (kind, environment, original_transaction_id, reason, requested_by, dedup_key)
            SELECT 'REQUERY', r.environment, r.original_transaction_id,
                   CASE WHEN r.product_id <> t.product_id
                        THEN 'FACTS_DISAGREE: renewal info names ' || r.product_id || ', current transaction ' || t.product_id
                        ELSE 'FACTS_DISAGREE: renewal date after the current transaction expires' END,
                   \(requestedBy), 'REQUERY/' || r.environment || '/' || r.original_transaction_id
              FROM apple_renewal_info r
              JOIN user_subscription s
                ON s.environment = r.environment AND s.original_transaction_id = r.original_transaction_id
              JOIN apple_transaction t ON t.environment = s.environment AND t.transaction_id = s.last_transaction_id
             WHERE r.updated_at >= now() - make_interval(secs => \(RetryPolicy.seconds(window)))
               AND r.environment = ANY(\(PostgresArray(environments))::text[])
               AND s.frozen_reason IS NULL AND t.revocation_date IS NULL
               AND r.signed_date > t.signed_date
               AND (r.product_id <> t.product_id
                    OR (r.renewal_date > t.expires_date + interval '1 minute' AND NOT r.is_in_billing_retry))
               AND NOT EXISTS (SELECT 1 FROM fulfillment_task q
                                WHERE q.kind = 'REQUERY' AND q.environment = r.environment
                                  AND q.original_transaction_id = r.original_transaction_id
                                  AND q.created_at > now() - make_interval(secs => \(RetryPolicy.seconds(cooldown))))
            ON CONFLICT (dedup_key) WHERE status = 'PENDING' DO NOTHING
            RETURNING environment || ':' || original_transaction_id AS chain
            """)
        return try rows.map { try $0.decode("chain") }
    }
}
