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
    /// Keeps this worker's calls under Apple's rate (`FULFILLMENT_REQUERY_RATE_*`).
    let pacer: RequestPacer
    let logger: Logger

    func run(_ task: ClaimedTask, originalTransactionID: String) async throws(ProcessingFailure) -> TaskResult {
        let client = try clients.client(serving: task)
        await pacer.wait(for: task.environment)
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

    static func envelope(_ item: LastTransactionsItem, uuid: String, environment: String, bundleID: String) throws -> String {
        try envelope(
            type: NotificationMatrix.statusRequery, uuid: uuid, environment: environment, bundleID: bundleID,
            signedTransactionInfo: item.signedTransactionInfo, signedRenewalInfo: item.signedRenewalInfo, status: item.rawStatus)
    }

    /// A notification-shaped envelope (`alg: none`, empty signature) around Apple's signed answer,
    /// so the worker's reader takes it like a notification and verifies the nested JWS.
    static func envelope(
        type: String, uuid: String, environment: String, bundleID: String, signedTransactionInfo: String?,
        signedRenewalInfo: String?, status: Int32? = nil
    ) throws -> String {
        var data = NotificationData()
        data.rawEnvironment = environment
        data.bundleId = bundleID
        data.signedTransactionInfo = signedTransactionInfo
        data.signedRenewalInfo = signedRenewalInfo
        data.rawStatus = status
        var payload = ResponseBodyV2DecodedPayload()
        payload.rawNotificationType = type
        payload.notificationUUID = uuid
        payload.version = "2.0"
        payload.signedDate = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 * 1000).rounded(.down) / 1000)
        payload.data = data
        let header = Base64URL.encode(Array(#"{"alg":"none"}"#.utf8))
        return header + "." + Base64URL.encode(Array(try AppStoreJSON.encoder().encode(payload))) + "."
    }
}
