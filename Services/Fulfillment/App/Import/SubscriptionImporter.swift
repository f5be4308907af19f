import AppStore
import Crypto
import Domain
import Foundation
import Pipeline
import Postgres
import ServiceRuntime
import Storage

/// Runs a user's import of their existing purchases: Get Transaction History (v2) with the
/// transaction they proved, every returned auto-renewable transaction verified and stored as a
/// `HISTORY_IMPORT` event (sealed, unique per import and transaction, applied in order like any
/// notification), each chain bound to the user unless it is someone else's (then its facts still
/// go to their owner and the import answers ACCOUNT_CONFLICT). The rules grant credits only for
/// the period in force: periods already over are kept as facts.
struct SubscriptionImporter: Sendable {
    let imports: ImportStore
    let bindings: ChainBindingStore
    let events: EventStore
    let publisher: EventPublisher
    let cipher: PayloadCipher
    let verifier: SignedDataVerifier
    let clients: AppStoreAPIClients
    let bundleID: String
    let logger: Logger

    func run(_ task: ClaimedTask, importID: Int64) async throws(ProcessingFailure) -> TaskResult {
        let job: ImportJob
        do {
            guard let found = try await imports.job(importID) else {
                throw ProcessingFailure.permanent(code: "IMPORT_NOT_FOUND", message: "import \(importID) is gone")
            }
            job = found
        } catch let failure as ProcessingFailure { throw failure } catch {
            throw .retryable(code: "RETRYABLE_DATABASE", message: "\(error)")
        }
        guard let client = clients.client(for: job.environment), let environment = AppStoreEnvironment(rawValue: job.environment)
        else {
            throw .permanent(code: "ENVIRONMENT_NOT_SERVED", message: "this deployment does not serve \(job.environment)")
        }
        var result = task.result
        var signed: [String] = []
        var revision: String?
        repeat {
            let page: HistoryResponse
            do {
                page = try await client.getTransactionHistory(
                    transactionId: job.lookupTransactionID, revision: revision,
                    request: TransactionHistoryRequest(productTypes: [.autoRenewableSubscription]))
            } catch  where error.apiError == .transactionIdNotFound || error.apiError == .originalTransactionIdNotFound {
                try await record { try await imports.fail(importID, code: "IMPORT_TRANSACTION_NOT_FOUND") }
                throw .permanent(code: "IMPORT_TRANSACTION_NOT_FOUND", message: "Apple knows no such transaction")
            } catch {
                throw Scheduler.failure(error)
            }
            signed += page.signedTransactions ?? []
            result.pages += 1
            revision = page.hasMore == true ? page.revision : nil
        } while revision != nil
        result.fetched = signed.count

        // Verified like any nested transaction; grouped by chain, oldest first.
        var chains: [String: [(payload: JWSTransactionDecodedPayload, jws: String)]] = [:]
        for jws in signed {
            do {
                let payload = try await verifier.verifyTransaction(jws, expectedEnvironment: environment)
                guard let original = payload.originalTransactionId, let id = payload.transactionId,
                    AppleTransactionID.isValid(original), AppleTransactionID.isValid(id)
                else {
                    result.refused += 1
                    continue
                }
                chains[original, default: []].append((payload, jws))
            } catch  where error.isRetryable {
                throw .retryable(code: error.code.rawValue, message: error.reason)
            } catch {
                result.refused += 1
                logger.warning("imported transaction refused", ["error.code": .string(error.code.rawValue)])
            }
        }
        var conflict = false
        var outbox: [OutboxEntry] = []
        for (original, transactions) in chains.sorted(by: { $0.key < $1.key }) {
            let tokens = transactions.compactMap { $0.payload.appAccountToken }
            let bound = try await record {
                try await bindings.bindImported(
                    environment: job.environment, originalTransactionID: original, userID: job.userID, tokens: tokens)
            }
            if !bound {
                conflict = true
                logger.warning(
                    "imported chain belongs to another user; its facts go to its owner",
                    ["appstore.original_transaction_id": .string(original), "user.id": .string(job.userID)])
            }
            let ordered = transactions.sorted { ($0.payload.purchaseDate ?? .distantPast) < ($1.payload.purchaseDate ?? .distantPast) }
            for (payload, jws) in ordered {
                let uuid = "import-\(importID)-\(payload.transactionId!)"
                let event: NewNotificationEvent
                do {
                    event = try NewNotificationEvent.sealing(
                        signedPayload: ChainRequery.envelope(
                            type: NotificationMatrix.historyImport, uuid: uuid, environment: job.environment, bundleID: bundleID,
                            signedTransactionInfo: jws, signedRenewalInfo: nil),
                        notificationUUID: uuid, type: NotificationMatrix.historyImport, subtype: nil, environment: job.environment,
                        signedDate: Date(), signedTransactionInfo: jws, cipher: cipher, traceID: "import-\(importID)")
                } catch {
                    throw .permanent(code: "SEAL_FAILED", message: "Apple's answer could not be sealed: \(error)")
                }
                let stored = try await record { try await events.insertNotification(event, publishGrace: .seconds(5)) }
                result.eventIDs.append(stored.eventID)
                if let entry = stored.outbox {
                    result.stored += 1
                    outbox.append(entry)
                } else {
                    result.duplicates += 1
                }
            }
        }
        await publisher.publish(outbox)
        try await record {
            try await imports.recordFetched(
                importID, originalTransactionIDs: chains.keys.sorted(), eventIDs: result.eventIDs, conflict: conflict)
        }
        logger.info(
            "purchases imported from Apple's transaction history",
            [
                "import.id": .int(importID), "user.id": .string(job.userID), "import.chains": .int(Int64(chains.count)),
                "import.events_stored": .int(Int64(result.stored)), "import.conflict": .bool(conflict),
            ])
        return result
    }

    /// A database step: its failure is retried with the task.
    private func record<T>(_ step: () async throws -> T) async throws(ProcessingFailure) -> T {
        do { return try await step() } catch { throw .retryable(code: "RETRYABLE_DATABASE", message: "\(error)") }
    }
}
