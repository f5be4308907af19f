import AppStore
import Crypto
import Foundation
import Pipeline
import Postgres
import ServiceRuntime
import Storage

/// Fills a gap in the notifications from Apple's Get Notification History: every page of the
/// range, each signed payload verified as the webhook verifies it and stored as the webhook
/// stores it (`NewNotificationEvent.sealing`: same table, same UUID key, same sealing, an outbox
/// row), so a notification Apple delivered meanwhile, or a second recovery, writes nothing new.
/// Progress is checkpointed after each page: another worker resumes an interrupted recovery.
struct NotificationRecovery: Sendable {
    let events: EventStore
    let publisher: EventPublisher
    let cipher: PayloadCipher
    let verifier: SignedDataVerifier
    let clients: AppStoreAPIClients
    let logger: Logger
    private let counted = Dictionary(
        uniqueKeysWithValues: ["stored", "duplicate", "refused"].map {
            (
                $0,
                MetricsRegistry.shared.counter(
                    "subs_recovered_notifications_total", help: "Notifications read from Apple's history, by result",
                    labels: ["result": $0])
            )
        })

    init(
        events: EventStore, publisher: EventPublisher, cipher: PayloadCipher, verifier: SignedDataVerifier,
        clients: AppStoreAPIClients, logger: Logger
    ) {
        self.events = events
        self.publisher = publisher
        self.cipher = cipher
        self.verifier = verifier
        self.clients = clients
        self.logger = logger
    }

    /// Runs the task to its last page; `checkpoint` records each page (false: the lease was lost).
    func run(
        _ task: ClaimedTask, start: Date, end: Date, onlyFailures: Bool, from token: String?,
        checkpoint: (String?, TaskResult) async throws -> Bool
    ) async throws(ProcessingFailure) -> TaskResult {
        guard let client = clients.client(for: task.environment),
            let environment = AppStoreEnvironment(rawValue: task.environment)
        else {
            throw .permanent(code: "ENVIRONMENT_NOT_SERVED", message: "this deployment does not serve \(task.environment)")
        }
        var result = task.result
        var token = token
        while true {
            let page: NotificationHistoryResponse
            do {
                page = try await client.getNotificationHistory(
                    paginationToken: token,
                    request: NotificationHistoryRequest(startDate: start, endDate: end, onlyFailures: onlyFailures ? true : nil))
            } catch {
                throw Scheduler.failure(error)
            }
            var outbox: [OutboxEntry] = []
            for item in page.notificationHistory ?? [] {
                guard let signedPayload = item.signedPayload else { continue }
                result.fetched += 1
                guard let event = try await verifiedEvent(signedPayload, environment: environment, task: task) else {
                    result.refused += 1
                    counted["refused"]?.increment()
                    continue
                }
                do {
                    let stored = try await events.insertNotification(event, publishGrace: .seconds(5))
                    if let entry = stored.outbox {
                        outbox.append(entry)
                        result.stored += 1
                        result.eventIDs.append(stored.eventID)
                        counted["stored"]?.increment()
                    } else {
                        result.duplicates += 1
                        counted["duplicate"]?.increment()
                    }
                } catch {
                    throw .retryable(code: "RETRYABLE_DATABASE", message: "\(error)")
                }
            }
            await publisher.publish(outbox)
            result.pages += 1
            let next = page.hasMore == true ? page.paginationToken : nil
            let held: Bool
            do { held = try await checkpoint(next, result) } catch {
                throw .retryable(code: "RETRYABLE_DATABASE", message: "\(error)")
            }
            guard held else { throw .leaseLost }
            guard let next else { break }
            token = next
        }
        logger.info(
            "notification history recovered",
            [
                "appstore.environment": .string(task.environment), "recovery.fetched": .int(Int64(result.fetched)),
                "recovery.stored": .int(Int64(result.stored)), "recovery.duplicates": .int(Int64(result.duplicates)),
                "recovery.refused": .int(Int64(result.refused)),
            ])
        return result
    }

    /// The row the webhook would store, or nil for a payload the webhook would refuse for good.
    private func verifiedEvent(_ signedPayload: String, environment: AppStoreEnvironment, task: ClaimedTask)
        async throws(ProcessingFailure) -> NewNotificationEvent?
    {
        let payload: ResponseBodyV2DecodedPayload
        do {
            payload = try await verifier.verifyNotification(signedPayload, expectedEnvironment: environment)
        } catch  where error.isRetryable {
            throw .retryable(code: error.code.rawValue, message: error.reason)
        } catch {
            logger.warning(
                "recovered notification refused", ["error.code": .string(error.code.rawValue), "error.reason": .string(error.reason)])
            return nil
        }
        guard let uuid = payload.notificationUUID, !uuid.isEmpty, uuid.count <= 128,
            let type = payload.rawNotificationType, !type.isEmpty
        else {
            logger.warning("recovered notification refused", ["error.code": .string("MALFORMED")])
            return nil
        }
        do {
            return try NewNotificationEvent.sealing(
                signedPayload: signedPayload, notificationUUID: uuid, type: type, subtype: payload.rawSubtype,
                environment: payload.data?.rawEnvironment ?? payload.summary?.rawEnvironment ?? environment.rawValue,
                signedDate: payload.signedDate, signedTransactionInfo: payload.data?.signedTransactionInfo, cipher: cipher,
                traceID: "recovery-\(task.id)")
        } catch {
            throw .permanent(code: "SEAL_FAILED", message: "could not seal a recovered payload")
        }
    }
}
