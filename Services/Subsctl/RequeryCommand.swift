import Foundation
import Postgres

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
        guard let original, !original.isEmpty, original.count <= 64,
            original.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) })
        else { return usageError("--original-transaction-id must be Apple's original transaction id") }
        guard let environment else { return usageError("--env must be Production or Sandbox") }
        guard let wait else { return usageError("--wait must be a whole number of seconds from 0 to 86400") }
        return await Subsctl.withDatabase { pool in
            let id = try await FulfillmentTaskRequest.submit(
                """
                INSERT INTO fulfillment_task (kind, environment, original_transaction_id, reason, requested_by, dedup_key)
                VALUES ('REQUERY', \(environment), \(original), \(reason), \(operatorName),
                        \("REQUERY/\(environment)/\(original)"))
                ON CONFLICT (dedup_key) WHERE status = 'PENDING'
                DO UPDATE SET next_attempt_at = least(fulfillment_task.next_attempt_at, now()), updated_at = now()
                RETURNING id
                """, audit: "REQUERY_REQUESTED", operator: operatorName, reason: reason, pool: pool)
            guard wait > 0 else {
                Subsctl.printOutput("task=\(id) status=PENDING")
                return ExitStatus.success
            }
            let started = ContinuousClock.now
            let task = try await FulfillmentTaskRequest.follow(id, seconds: wait, pool: pool)
            let status = FulfillmentTaskRequest.report(task, id: id, seconds: wait)
            guard status == ExitStatus.success, let task else { return status }
            // The answer travels as events: wait for them before showing the chain.
            let events = (task.result["eventIDs"] as? [Int]) ?? []
            let remaining = max(1, wait - Int((ContinuousClock.now - started).components.seconds))
            let deadline = ContinuousClock.now + .seconds(remaining)
            while true {
                let open: Int = try await pool.query(
                    """
                    SELECT count(*) FROM apple_notification_event
                     WHERE id = ANY(\(PostgresArray(events.map(Int64.init)))::bigint[])
                       AND process_status NOT IN ('SUCCEEDED', 'DEAD')
                    """
                ).first!.decode(0)
                if open == 0 { break }
                if ContinuousClock.now >= deadline {
                    Subsctl.printError("Apple's answer is stored but \(open) event(s) are not applied yet")
                    return ExitStatus.temporaryFailure
                }
                try await Task.sleep(for: .milliseconds(250))
            }
            for row in try await pool.query(
                """
                SELECT id, process_status, coalesce(error_code, '') AS error_code FROM apple_notification_event
                 WHERE id = ANY(\(PostgresArray(events.map(Int64.init)))::bigint[]) ORDER BY id
                """)
            {
                let code: String = try row.decode("error_code")
                Subsctl.printOutput(
                    "event=\(try row.decode("id", as: Int64.self)) status=\(try row.decode("process_status", as: String.self))"
                        + (code.isEmpty ? "" : " error=\(code)"))
            }
            if let row = try await pool.query(
                """
                SELECT status, active_product_id, coalesce(pending_product_id, '-') AS pending,
                       coalesce(to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), '-') AS expires,
                       auto_renew_enabled
                  FROM user_subscription WHERE environment = \(environment) AND original_transaction_id = \(original)
                """
            ).first {
                Subsctl.printOutput(
                    "subscription=\(environment):\(original) status=\(try row.decode("status", as: String.self))"
                        + " product=\(try row.decode("active_product_id", as: String.self))"
                        + " pending=\(try row.decode("pending", as: String.self))"
                        + " expires=\(try row.decode("expires", as: String.self))"
                        + " autoRenew=\(try row.decode("auto_renew_enabled", as: Bool.self))")
            } else {
                Subsctl.printOutput("subscription=\(environment):\(original) none")
            }
            return ExitStatus.success
        }
    }
}
