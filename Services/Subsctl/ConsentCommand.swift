import Foundation
import Postgres

/// `subsctl consent`: records what a user agreed to share (for now: consumption data, which
/// decides whether a CONSUMPTION_REQUEST is answered), with an audit row. The app's back end
/// calls it with the user's choice; `unknown` forgets it (counts as no).
enum ConsentCommand: SubsctlCommand {
    static let path = ["consent"]
    static let usage = "consent --user-id ID --consumption-data granted|denied|unknown [--reason TEXT] [--operator NAME]"
    static let summary =
        "Record whether a user consented to share consumption data with Apple (refund requests); print before and after."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let user = arguments.option("user-id")
        let choice = arguments.option("consumption-data")?.lowercased()
        let reason = arguments.option("reason") ?? "user choice"
        let operatorName = FulfillmentTaskRequest.operatorName(arguments.option("operator"))
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        guard let user, !user.isEmpty, user.count <= 128 else { return usageError("--user-id must be a user id of 1 to 128 characters") }
        let granted: Bool?
        switch choice {
        case "granted": granted = true
        case "denied": granted = false
        case "unknown": granted = nil
        default: return usageError("--consumption-data must be granted, denied or unknown")
        }
        return await Subsctl.withDatabase { pool in
            let outcome: (before: String, after: String)? = try await pool.transaction { db in
                guard try await db.query("SELECT 1 FROM app_user WHERE user_id = \(user) FOR UPDATE").count == 1 else { return nil }
                let before = try await db.query(
                    "SELECT granted FROM user_consent WHERE user_id = \(user) AND purpose = 'CONSUMPTION_DATA' FOR UPDATE"
                ).first.map { try $0.decode("granted", as: Bool.self) }
                if let granted {
                    try await db.query(
                        """
                        INSERT INTO user_consent (user_id, purpose, granted, recorded_by)
                        VALUES (\(user), 'CONSUMPTION_DATA', \(granted), \(operatorName))
                        ON CONFLICT (user_id, purpose) DO UPDATE
                            SET granted = EXCLUDED.granted, recorded_by = EXCLUDED.recorded_by, recorded_at = now()
                        """)
                } else {
                    try await db.query("DELETE FROM user_consent WHERE user_id = \(user) AND purpose = 'CONSUMPTION_DATA'")
                }
                try await db.query(
                    """
                    INSERT INTO audit_log (operator, action, reason, before, after)
                    VALUES (\(operatorName), 'CONSENT_RECORDED', \(reason),
                            jsonb_build_object('userId', \(user)::text, 'consumptionData', \(before)::boolean),
                            jsonb_build_object('userId', \(user)::text, 'consumptionData', \(granted)::boolean))
                    """)
                return (Self.word(before), Self.word(granted))
            }
            guard let outcome else {
                Subsctl.printError("no user \(user)")
                return ExitStatus.refused
            }
            Subsctl.printOutput("user=\(user) consumptionData=\(outcome.after) (was \(outcome.before))")
            return ExitStatus.success
        }
    }

    static func word(_ granted: Bool?) -> String { granted.map { $0 ? "granted" : "denied" } ?? "unknown" }
}
