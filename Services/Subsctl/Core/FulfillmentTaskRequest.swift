import Foundation
import Postgres
import ServiceRuntime
import Storage

/// What `subsctl requery` and `subsctl recover` share: they only write a request into
/// `fulfillment_task` (with its audit row, `TaskStore`) in the database of `DATABASE_URL`; the fulfillment
/// workers, which hold the App Store Server API key and the payload keys, carry it out. The
/// command then follows the task until it is DONE or FAILED, or `--wait` seconds pass.
enum FulfillmentTaskRequest {
    /// A task row as the operator sees it.
    struct Outcome: Encodable {
        var id: Int64
        var status: String
        /// The result as the worker wrote it: the text shows only the counters it holds.
        var result: [String: Any]
        /// The same result with every counter, for `--json`.
        var counters: TaskResult
        var errorCode: String?
        var errorMessage: String?

        /// A task just stored, not looked at by a worker yet.
        static func requested(_ id: Int64) -> Outcome {
            Outcome(
                id: id, status: TaskStatus.pending.rawValue, result: [:], counters: TaskResult(), errorCode: nil, errorMessage: nil)
        }

        enum CodingKeys: String, CodingKey {
            case id = "taskId"
            case counters = "result"
            case status, errorCode, errorMessage
        }
    }

    /// What `requery` and `recover` print: the task, and for a re-query what Apple's answer did.
    struct Output: Encodable {
        /// A re-query's event, once applied.
        struct Event: Encodable {
            var eventId: Int64
            var status: String
            var errorCode: String?
        }

        /// A re-queried chain as it stands afterwards.
        struct Subscription: Encodable {
            var environment: String
            var originalTransactionId: String
            var status: String
            var activeProductId: String
            var pendingProductId: String?
            var expiresAt: Date?
            var autoRenewEnabled: Bool
        }

        var task: Outcome
        var events: [Event]?
        var subscription: Subscription?
        /// The lines printed without `--json`.
        var text: String

        init(task: Outcome) {
            self.task = task
            text = FulfillmentTaskRequest.summary(task)
        }

        enum CodingKeys: String, CodingKey { case task, events, subscription }
    }

    /// `--wait SECONDS` (default 120; 0 returns once the request is stored).
    static func waitSeconds(_ text: String?) -> Int? {
        guard let text else { return 120 }
        guard let value = Int(text), (0...86_400).contains(value) else { return nil }
        return value
    }

    /// `Production` or `Sandbox`, case-insensitively.
    static func environment(_ text: String?) -> String? {
        ["Production", "Sandbox"].first { $0.lowercased() == text?.lowercased() }
    }

    /// Polls the task until it is final or `seconds` pass (nil then).
    static func follow(_ id: Int64, seconds: Int, tasks: TaskStore) async throws -> Outcome? {
        let started = ContinuousClock.now
        let deadline = started + .seconds(seconds)
        var reported = started
        while true {
            let task = try await read(id, tasks: tasks)
            if task.status != TaskStatus.pending.rawValue { return task }
            if ContinuousClock.now >= deadline { return nil }
            if ContinuousClock.now - reported >= .seconds(5) {
                reported = ContinuousClock.now
                let counters = ["pages", "fetched", "stored"].compactMap { key in (task.result[key] as? Int).map { "\(key)=\($0)" } }
                Subsctl.printProgress(
                    "task \(id) pending after \((reported - started).components.seconds) s " + counters.joined(separator: " "))
            }
            try await Task.sleep(for: .milliseconds(250))
        }
    }

    static func read(_ id: Int64, tasks: TaskStore) async throws -> Outcome {
        guard let task = try await tasks.outcome(of: id) else { throw MissingTask(id: id) }
        let json = try JSONSerialization.jsonObject(with: Data(task.resultJSON.utf8))
        return Outcome(
            id: id, status: task.status.rawValue, result: json as? [String: Any] ?? [:],
            counters: try JSONDecoder().decode(TaskResult.self, from: Data(task.resultJSON.utf8)), errorCode: task.errorCode,
            errorMessage: task.errorMessage)
    }

    /// The task the command stored is gone (deleted by hand meanwhile).
    struct MissingTask: Error, CustomStringConvertible {
        var id: Int64
        var description: String { "task \(id) no longer exists" }
    }

    /// The counters of a finished task, `name=value` in a stable order.
    static func summary(_ task: Outcome) -> String {
        var line = "task=\(task.id) status=\(task.status)"
        for key in ["pages", "fetched", "stored", "duplicates", "refused"] {
            // A re-query reads no pages.
            if let value = task.result[key] as? Int, key != "pages" || value > 0 { line += " \(key)=\(value)" }
        }
        if let code = task.errorCode { line += " error=\(code)" }
        return line
    }

    /// The exit status of a task request, after printing what became of it (nil: still pending
    /// after `seconds` of following it).
    static func report(_ output: Output?, id: Int64, seconds: Int, asJSON: Bool) throws -> Int32 {
        guard let output else {
            Subsctl.printError("task \(id) is still pending after \(seconds) s (is a worker with the App Store Server API key running?)")
            return ExitStatus.temporaryFailure
        }
        try Subsctl.printResult(output, asJSON: asJSON) { output.text }
        let task = output.task
        if task.status == TaskStatus.failed.rawValue {
            Subsctl.printError("task \(id) failed: \(task.errorCode ?? "") \(task.errorMessage ?? "")")
            return ExitStatus.refused
        }
        return ExitStatus.success
    }
}
