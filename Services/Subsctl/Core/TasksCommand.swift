import Foundation
import Postgres
import ServiceRuntime
import Storage

/// `subsctl tasks`: the workers' task queue (re-queries, recoveries, Set App Account Token,
/// imports, Finish Transaction), newest first, so an operator sees what waits, what failed and why
/// without SQL.
enum TasksCommand: SubsctlCommand {
    static let path = ["tasks"]
    static let usage =
        "tasks [--kind REQUERY|RECOVERY|SET_APP_ACCOUNT_TOKEN|IMPORT|FINISH_TRANSACTION] [--status PENDING|DONE|FAILED]"
        + " [--limit 1-1000] [--json]"
    static let summary = "List the workers' tasks, newest first (50 unless --limit), of one kind and status when given."

    /// The `--json` answer.
    struct Output: Encodable {
        var tasks: [TaskSummary]
    }

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let kindText = arguments.option("kind")
        let statusText = arguments.option("status")
        let limitText = arguments.option("limit")
        let asJSON = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        let kind = kindText.flatMap { TaskKind(rawValue: $0.uppercased()) }
        guard kindText == nil || kind != nil else {
            return usageError("--kind must be REQUERY, RECOVERY, SET_APP_ACCOUNT_TOKEN, IMPORT or FINISH_TRANSACTION")
        }
        let status = statusText.flatMap { TaskStatus(rawValue: $0.uppercased()) }
        guard statusText == nil || status != nil else { return usageError("--status must be PENDING, DONE or FAILED") }
        guard let limit = limitText.map({ Int($0) }) ?? 50, (1...1000).contains(limit) else {
            return usageError("--limit must be a whole number from 1 to 1000")
        }
        return await Subsctl.withDatabase { pool in
            let tasks = try await TaskStore(pool: pool).list(kind: kind, status: status, limit: limit)
            try Subsctl.printResult(Output(tasks: tasks), asJSON: asJSON) {
                guard !tasks.isEmpty else { return "no tasks" }
                return tasks.map { task in
                    "task=\(task.id) kind=\(task.kind) env=\(task.environment) subject=\(task.subject) status=\(task.status)"
                        + " attempts=\(task.attempts) created=\(RFC3339.string(from: task.createdAt))"
                        + (task.nextAttemptAt.map { " next=\(RFC3339.string(from: $0))" } ?? "")
                        + (task.completedAt.map { " completed=\(RFC3339.string(from: $0))" } ?? "")
                        + (task.errorCode.map { " error=\($0)" } ?? "") + (task.errorMessage.map { " message=\"\($0)\"" } ?? "")
                }.joined(separator: "\n")
            }
            return ExitStatus.success
        }
    }
}
