import Foundation
import Postgres
import ServiceRuntime
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

/// `subsctl consent restore`: gives back what a RESCIND_CONSENT turned off, when the parent granted
/// consent again (Apple tells us nothing of it) or Apple's notification named the wrong account;
/// the admin API's `POST /admin/v1/users/{userId}/consent/restore`, with the same audit row and event.
enum ConsentRestoreCommand: SubsctlCommand {
    static let path = ["consent", "restore"]
    static let usage = "consent restore --user-id ID --reason TEXT [--operator NAME] [--json]"
    static let summary =
        "Restore a consent a parent's RESCIND_CONSENT withdrew: the user's entitlements read as their chains and grants say again."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let user = arguments.userID()
        let reason = arguments.option("reason")
        let operatorName = arguments.operatorName()
        let asJSON = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        guard let user, !user.isEmpty, user.count <= 128 else { return usageError("--user-id must be a user id of 1 to 128 characters") }
        guard let reason, !reason.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty, reason.count <= 1000 else {
            return usageError("--reason is required (1 to 1000 characters): say why, for the audit trail")
        }
        // The events carry the deployment's environment, as the ingress's do.
        let environment = Subsctl.environment["APPLE_IAP_ENV"] ?? "Production"
        return await Subsctl.withDatabase { pool in
            let restored: UserStore.ConsentRestoration
            do {
                restored = try await UserStore(pool: pool).restoreConsent(
                    userID: user, environment: environment, operator: operatorName, reason: reason, now: Date())
            } catch UserStore.ConsentRestoreError.unknownUser {
                Subsctl.printError("no user \(user): nothing restored")
                return ExitStatus.refused
            } catch UserStore.ConsentRestoreError.notRescinded {
                Subsctl.printError("user \(user)'s consent is not rescinded (never, or restored already): nothing changed")
                return ExitStatus.refused
            }
            try Subsctl.printResult(restored, asJSON: asJSON) {
                "user=\(user) consent restored (rescinded \(RFC3339.string(from: restored.rescindedAt))) entitlements="
                    + (restored.entitlements.isEmpty ? "none" : restored.entitlements.joined(separator: ","))
            }
            return ExitStatus.success
        }
    }
}
