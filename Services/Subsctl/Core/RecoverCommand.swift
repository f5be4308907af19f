import Foundation
import Postgres
import ServiceRuntime
import Storage

/// `subsctl recover`: asks the workers to recover the notifications Apple sent in a range, from
/// Get Notification History (see FulfillmentTaskRequest). Idempotent: notifications already
/// stored are counted as duplicates and write nothing.
enum RecoverCommand: SubsctlCommand {
    static let path = ["recover"]
    static let usage =
        "recover --from RFC3339 --to RFC3339 --env Production|Sandbox [--reason TEXT] [--operator NAME] [--wait SECONDS] [--json]"
    static let summary =
        "Recover the notifications Apple sent in [from, to) from Get Notification History (run by a worker); print the counts."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let from = arguments.option("from").flatMap(RFC3339.date(from:))
        let to = arguments.option("to").flatMap(RFC3339.date(from:))
        let environment = FulfillmentTaskRequest.environment(arguments.option("env"))
        let reason = arguments.option("reason") ?? "operator request"
        let operatorName = arguments.operatorName()
        let wait = FulfillmentTaskRequest.waitSeconds(arguments.option("wait"))
        let asJSON = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        guard let from, let to else { return usageError("--from and --to must be RFC 3339 times, e.g. 2026-11-29T10:00:00Z") }
        guard let environment else { return usageError("--env must be Production or Sandbox") }
        guard let wait else { return usageError("--wait must be a whole number of seconds from 0 to 86400") }
        let now = Date()
        if let problem = TaskStore.recoveryRangeProblem(
            from: from, to: to, environment: environment, now: now, names: ("--from", "--to"))
        {
            return usageError(problem)
        }
        return await Subsctl.withDatabase { pool in
            let tasks = TaskStore(pool: pool)
            let id = try await tasks.requestRecovery(
                environment: environment, start: from, end: min(to, now), reason: reason, operator: operatorName)
            let task = try await wait > 0 ? FulfillmentTaskRequest.follow(id, seconds: wait, tasks: tasks) : .requested(id)
            return try FulfillmentTaskRequest.report(
                task.map(FulfillmentTaskRequest.Output.init(task:)), id: id, seconds: wait, asJSON: asJSON)
        }
    }
}
