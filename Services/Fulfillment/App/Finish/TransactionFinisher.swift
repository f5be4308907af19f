import AppStore
import ServiceRuntime
import Storage

/// Calls Finish Transaction for a transaction the worker delivered (`APPLE_FINISH_TRANSACTIONS`),
/// as a task queued by the apply itself: the fulfilment never waits for Apple, and the call
/// survives crashes. A transaction Apple does not know (404) is recorded as such and not asked
/// again; other refusals fail the task for good, retryable failures come back with backoff.
struct TransactionFinisher: Sendable {
    let tasks: TaskStore
    let clients: AppStoreAPIClients
    /// This worker's id, the author of the audit row of a give-up.
    let owner: String
    let logger: Logger

    func run(_ task: ClaimedTask, transactionID: String) async throws(ProcessingFailure) -> TaskResult {
        let client = try clients.client(serving: task)
        var result = task.result
        do {
            try await client.finishTransaction(transactionId: transactionID)
            result.outcome = "FINISHED"
        } catch  where !error.isRetryable && error.statusCode == 404 {
            // Retrying would get the same answer: kept on the task for whoever looks it up.
            result.outcome = "TRANSACTION_NOT_FOUND"
            logger.warning(
                "Apple does not know the delivered transaction; Finish Transaction not retried",
                ["appstore.transaction_id": .string(transactionID), "appstore.error": .string(error.description)])
        } catch {
            throw Scheduler.failure(error)
        }
        Self.count(result.outcome == "FINISHED" ? "finished" : "not_found")
        return result
    }

    /// A failure the scheduler recorded: counted, and audited when it gave the task up.
    func recorded(_ task: ClaimedTask, code: String, message: String, givenUp: Bool) async {
        Self.count(givenUp ? "failed" : "retry")
        guard givenUp else { return }
        do {
            try await tasks.auditFinishGivenUp(task.id, owner: owner, reason: "\(code): \(message)")
        } catch {
            logger.warning("Finish Transaction given up, audit row not written", ["error": .string("\(error)")])
        }
    }

    /// `subs_apple_finish_transactions_total{outcome}`: finished, not_found, retry, failed.
    static func count(_ outcome: String) {
        MetricsRegistry.shared.counter(
            "subs_apple_finish_transactions_total", help: "Finish Transaction calls for delivered transactions, by outcome",
            labels: ["outcome": outcome]
        ).increment()
    }
}
