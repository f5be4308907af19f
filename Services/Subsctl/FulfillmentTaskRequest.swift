import Foundation
import Postgres
import ServiceRuntime

/// What `subsctl requery` and `subsctl recover` share: they only write a request into
/// `fulfillment_task` (with its audit row) in the database of `DATABASE_URL`; the fulfillment
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

    /// Stores the request and its audit row in one transaction; returns the task id (an equal
    /// pending request is reused and made due now).
    static func submit(_ insert: PostgresQuery, audit action: String, operator name: String, reason: String, pool: PostgresPool)
        async throws -> Int64
    {
        try await pool.transaction { db in
            let row = try await db.query(insert).first!
            let id: Int64 = try row.decode("id")
            try await db.query(
                """
                INSERT INTO audit_log (operator, action, reason, after)
                SELECT \(name), \(action), \(reason), to_jsonb(t) - 'result' FROM fulfillment_task t WHERE t.id = \(id)
                """)
            return id
        }
    }

    /// Polls the task until it is final or `seconds` pass (nil then).
    static func follow(_ id: Int64, seconds: Int, pool: PostgresPool) async throws -> Outcome? {
        let deadline = ContinuousClock.now + .seconds(seconds)
        while true {
            let task = try await read(id, pool: pool)
            if task.status != "PENDING" { return task }
            if ContinuousClock.now >= deadline { return nil }
            try await Task.sleep(for: .milliseconds(250))
        }
    }

    static func read(_ id: Int64, pool: PostgresPool) async throws -> Outcome {
        let row = try await pool.query(
            "SELECT status, result::text AS result, error_code, error_message FROM fulfillment_task WHERE id = \(id)"
        ).first!
        let json = try JSONSerialization.jsonObject(with: Data(try row.decode("result", as: String.self).utf8))
        return Outcome(
            id: id, status: try row.decode("status"), result: json as? [String: Any] ?? [:],
            errorCode: try row.decode("error_code", as: String?.self),
            errorMessage: try row.decode("error_message", as: String?.self))
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
        if task.status == "FAILED" {
            Subsctl.printError("task \(id) failed: \(task.errorCode ?? "") \(task.errorMessage ?? "")")
            return ExitStatus.refused
        }
        return ExitStatus.success
    }
}
