import Foundation
import Postgres
import Storage

/// `subsctl consent`: records what a user agreed to share (for now: consumption data, which
/// decides whether a CONSUMPTION_REQUEST is answered), with an audit row. The app's back end
/// calls it with the user's choice; `unknown` forgets it (counts as no).
enum ConsentCommand: SubsctlCommand {
    static let path = ["consent"]
    static let usage = "consent --user-id ID --consumption-data granted|denied|unknown [--reason TEXT] [--operator NAME] [--json]"
    static let summary =
        "Record whether a user consented to share consumption data with Apple (refund requests); print before and after."

    /// The `--json` answer: the choice after and before, in the words the option takes.
    struct Output: Encodable {
        var userId: String
        var consumptionData: String
        var wasConsumptionData: String
    }

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let user = arguments.option("user-id")
        let choice = arguments.option("consumption-data")?.lowercased()
        let reason = arguments.option("reason") ?? "user choice"
        let operatorName = arguments.operatorName()
        let asJSON = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        guard let user, !user.isEmpty, user.count <= 128 else { return usageError("--user-id must be a user id of 1 to 128 characters") }
        guard let consent = choice.flatMap({ ConsumptionConsent(rawValue: $0.uppercased()) }) else {
            return usageError("--consumption-data must be granted, denied or unknown")
        }
        return await Subsctl.withDatabase { pool in
            guard
                let outcome = try await ConsentStore(pool: pool).record(
                    consent, userID: user, createUser: false, recordedBy: operatorName, reason: reason)
            else {
                Subsctl.printError("no user \(user)")
                return ExitStatus.refused
            }
            let output = Output(userId: user, consumptionData: word(outcome.after), wasConsumptionData: word(outcome.before))
            try Subsctl.printResult(output, asJSON: asJSON) {
                "user=\(user) consumptionData=\(output.consumptionData) (was \(output.wasConsumptionData))"
            }
            return ExitStatus.success
        }
    }

    static func word(_ consent: ConsumptionConsent) -> String { consent.rawValue.lowercased() }
}
