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
    struct Outcome {
        var id: Int64
        var status: String
        var result: [String: Any]
        var errorCode: String?
        var errorMessage: String?
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
            id: id, status: task.status.rawValue, result: json as? [String: Any] ?? [:], errorCode: task.errorCode,
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

    /// The exit status of a followed task, after printing what became of it.
    static func report(_ task: Outcome?, id: Int64, seconds: Int) -> Int32 {
        guard let task else {
            Subsctl.printError("task \(id) is still pending after \(seconds) s (is a worker with the App Store Server API key running?)")
            return ExitStatus.temporaryFailure
        }
        Subsctl.printOutput(summary(task))
        if task.status == TaskStatus.failed.rawValue {
            Subsctl.printError("task \(id) failed: \(task.errorCode ?? "") \(task.errorMessage ?? "")")
            return ExitStatus.refused
        }
        return ExitStatus.success
    }
}
