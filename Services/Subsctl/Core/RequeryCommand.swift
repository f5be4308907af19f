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
        "requery --original-transaction-id ID --env Production|Sandbox [--reason TEXT] [--operator NAME] [--wait SECONDS] [--json]"
    static let summary =
        "Re-project a subscription chain from Apple's Get All Subscription Statuses (run by a worker); print the chain after it."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let original = arguments.option("original-transaction-id")
        let environment = FulfillmentTaskRequest.environment(arguments.option("env"))
        let reason = arguments.option("reason") ?? "operator request"
        let operatorName = arguments.operatorName()
        let wait = FulfillmentTaskRequest.waitSeconds(arguments.option("wait"))
        let asJSON = arguments.flag("json")
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
            let started = ContinuousClock.now
            let task = try await wait > 0 ? FulfillmentTaskRequest.follow(id, seconds: wait, tasks: tasks) : .requested(id)
            let followed = task.map(FulfillmentTaskRequest.Output.init(task:))
            guard var output = followed, output.task.status == TaskStatus.done.rawValue else {
                return try FulfillmentTaskRequest.report(followed, id: id, seconds: wait, asJSON: asJSON)
            }
            // The answer travels as events: wait for them before showing the chain.
            let ids = output.task.counters.eventIDs
            let events = EventStore(pool: pool, topic: "")
            let remaining = max(1, wait - Int((ContinuousClock.now - started).components.seconds))
            let deadline = ContinuousClock.now + .seconds(remaining)
            var states = try await events.statuses(of: ids)
            while true {
                let open = states.filter { !$0.status.isFinal }.count
                if open == 0 { break }
                if ContinuousClock.now >= deadline {
                    _ = try FulfillmentTaskRequest.report(output, id: id, seconds: wait, asJSON: asJSON)
                    Subsctl.printError("Apple's answer is stored but \(open) event(s) are not applied yet")
                    return ExitStatus.temporaryFailure
                }
                try await Task.sleep(for: .milliseconds(250))
                states = try await events.statuses(of: ids)
            }
            output.events = states.map { .init(eventId: $0.id, status: $0.status.rawValue, errorCode: $0.errorCode) }
            for state in states {
                output.text += "\nevent=\(state.id) status=\(state.status.rawValue)" + (state.errorCode.map { " error=\($0)" } ?? "")
            }
            if let chain = try await tasks.chain(environment: environment, originalTransactionID: original) {
                output.subscription = .init(
                    environment: environment, originalTransactionId: original, status: chain.status, activeProductId: chain.activeProductID,
                    pendingProductId: chain.pendingProductID, expiresAt: chain.expiresAt, autoRenewEnabled: chain.autoRenewEnabled)
                output.text +=
                    "\nsubscription=\(environment):\(original) status=\(chain.status) product=\(chain.activeProductID)"
                    + " pending=\(chain.pendingProductID ?? "-") expires=\(chain.expiresAt.map { RFC3339.string(from: $0) } ?? "-")"
                    + " autoRenew=\(chain.autoRenewEnabled)"
            } else {
                output.text += "\nsubscription=\(environment):\(original) none"
            }
            return try FulfillmentTaskRequest.report(output, id: id, seconds: wait, asJSON: asJSON)
        }
    }
}
