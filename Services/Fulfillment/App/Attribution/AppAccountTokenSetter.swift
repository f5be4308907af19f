import AppStore
import Foundation
import ServiceRuntime
import Storage

/// Sets a bound chain's appAccountToken at Apple (Set App Account Token), so the chain's later
/// facts carry its user's token and attribute themselves. The outcome is kept on the binding:
/// `SET`, or `FAMILY_NOT_SUPPORTED` (Apple refuses family transactions; the binding alone then
/// attributes the chain). Anything Apple may answer differently later is retried as a task.
struct AppAccountTokenSetter: Sendable {
    let bindings: ChainBindingStore
    let clients: AppStoreAPIClients
    let logger: Logger

    func run(_ task: ClaimedTask, originalTransactionID: String) async throws(ProcessingFailure) -> TaskResult {
        let client = try clients.client(serving: task)
        let bound: (userID: String, token: UUID)?
        do {
            bound = try await bindings.tokenToSet(environment: task.environment, originalTransactionID: originalTransactionID)
        } catch {
            throw .retryable(code: "RETRYABLE_DATABASE", message: "\(error)")
        }
        guard let bound else { throw .permanent(code: "CHAIN_NOT_BOUND", message: "the chain has no binding to set") }
        var result = task.result
        let status: AppleTokenStatus
        do {
            try await client.setAppAccountToken(
                originalTransactionId: originalTransactionID, UpdateAppAccountTokenRequest(appAccountToken: bound.token))
            status = .set
        } catch  where error.apiError == .familyTransactionNotSupported {
            status = .familyNotSupported
        } catch  where !error.isRetryable {
            try? await bindings.recordAppleToken(
                .failed, environment: task.environment, originalTransactionID: originalTransactionID)
            throw Scheduler.failure(error)
        } catch {
            throw Scheduler.failure(error)
        }
        do {
            try await bindings.recordAppleToken(status, environment: task.environment, originalTransactionID: originalTransactionID)
        } catch {
            throw .retryable(code: "RETRYABLE_DATABASE", message: "\(error)")
        }
        result.outcome = status.rawValue
        logger.info(
            "app account token set at Apple",
            [
                "appstore.original_transaction_id": .string(originalTransactionID), "user.id": .string(bound.userID),
                "appstore.outcome": .string(status.rawValue),
            ])
        return result
    }
}
