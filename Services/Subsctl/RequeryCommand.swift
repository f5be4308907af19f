import Domain
import Foundation
import Postgres
import ServiceRuntime
import Storage

/// `subsctl requery`: asks the workers to re-project a chain from Apple's Get All Subscription
/// Statuses (see FulfillmentTaskRequest), then shows the chain once the answer is applied.
enum RequeryCommand: SubsctlCommand {
    static let path = ["requery"]
    static let usage =
        "requery --original-transaction-id ID --env Production|Sandbox [--reason TEXT] [--operator NAME] [--wait SECONDS]"
    static let summary =
        "Re-project a subscription chain from Apple's Get All Subscription Statuses (run by a worker); print the chain after it."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let original = arguments.option("original-transaction-id")
        let environment = FulfillmentTaskRequest.environment(arguments.option("env"))
        let reason = arguments.option("reason") ?? "operator request"
        let operatorName = arguments.operatorName()
        let wait = FulfillmentTaskRequest.waitSeconds(arguments.option("wait"))
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        guard let original, AppleTransactionID.isValid(original)
        else { return usageError("--original-transaction-id must be Apple's original transaction id (digits)") }
        guard let environment else { return usageError("--env must be Production or Sandbox") }
        guard let wait else { return usageError("--wait must be a whole number of seconds from 0 to 86400") }
        return await Subsctl.withDatabase { pool in
            let tasks = TaskStore(pool: pool)
            let id = try await tasks.requestRequery(
                environment: environment, originalTransactionID: original, reason: reason, operator: operatorName)
            guard wait > 0 else {
                Subsctl.printOutput("task=\(id) status=PENDING")
                return ExitStatus.success
            }
            let started = ContinuousClock.now
            let task = try await FulfillmentTaskRequest.follow(id, seconds: wait, tasks: tasks)
            let status = FulfillmentTaskRequest.report(task, id: id, seconds: wait)
            guard status == ExitStatus.success, let task else { return status }
            // The answer travels as events: wait for them before showing the chain.
            let ids = ((task.result["eventIDs"] as? [Int]) ?? []).map(Int64.init)
            let events = EventLeaseStore(pool: pool)
            let remaining = max(1, wait - Int((ContinuousClock.now - started).components.seconds))
            let deadline = ContinuousClock.now + .seconds(remaining)
            var states = try await events.statuses(of: ids)
            while true {
                let open = states.filter { !$0.status.isFinal }.count
                if open == 0 { break }
                if ContinuousClock.now >= deadline {
                    Subsctl.printError("Apple's answer is stored but \(open) event(s) are not applied yet")
                    return ExitStatus.temporaryFailure
                }
                try await Task.sleep(for: .milliseconds(250))
                states = try await events.statuses(of: ids)
            }
            for state in states {
                Subsctl.printOutput(
                    "event=\(state.id) status=\(state.status.rawValue)" + (state.errorCode.map { " error=\($0)" } ?? ""))
            }
            if let chain = try await tasks.chain(environment: environment, originalTransactionID: original) {
                Subsctl.printOutput(
                    "subscription=\(environment):\(original) status=\(chain.status) product=\(chain.activeProductID)"
                        + " pending=\(chain.pendingProductID ?? "-") expires=\(chain.expiresAt.map { RFC3339.string(from: $0) } ?? "-")"
                        + " autoRenew=\(chain.autoRenewEnabled)")
            } else {
                Subsctl.printOutput("subscription=\(environment):\(original) none")
            }
            return ExitStatus.success
        }
    }
}
