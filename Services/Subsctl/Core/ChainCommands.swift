import Domain
import Foundation
import Postgres
import Storage

/// `subsctl chain attribute` and `subsctl chain unfreeze`: an operator decides who a subscription
/// chain belongs to when its facts cannot (no appAccountToken, or two users claiming it). Both run
/// `ChainBindingStore` (the admin API runs the same): one transaction with the audit row, the
/// replay of the chain's waiting facts, and a Set App Account Token task for the workers.
enum ChainCommandOptions {
    struct Parsed {
        var original: String
        var userID: String
        var environment: String?
        var reason: String
        var operatorName: String
        var asJSON: Bool
    }

    /// The options both commands take; `userOption` names the user (`user-id`, `owner-user-id`).
    static func parse(_ arguments: ParsedArguments, userOption: String) throws(ParsedArguments.UsageError) -> Parsed {
        var arguments = arguments
        let original = arguments.option("original-transaction-id")
        let user = arguments.option(userOption)
        let environmentText = arguments.option("env")
        let reason = arguments.option("reason")
        let operatorName = arguments.operatorName()
        let asJSON = arguments.flag("json")
        try arguments.checkAllOptionsUsed()
        if let extra = arguments.positionals.first { throw .init(description: "unexpected argument \(extra)") }
        guard let original, AppleTransactionID.isValid(original)
        else { throw .init(description: "--original-transaction-id must be Apple's original transaction id (digits)") }
        guard let user, !user.isEmpty, user.count <= 128 else {
            throw .init(description: "--\(userOption) must be a user id of 1 to 128 characters")
        }
        var environment: String?
        if let environmentText {
            guard let known = FulfillmentTaskRequest.environment(environmentText) else {
                throw .init(description: "--env must be Production or Sandbox")
            }
            environment = known
        }
        guard let reason, !reason.trimmingCharacters(in: .whitespaces).isEmpty else {
            throw .init(description: "--reason is required: say why, for the audit trail")
        }
        return Parsed(
            original: original, userID: user, environment: environment, reason: reason, operatorName: operatorName, asJSON: asJSON)
    }

    /// Runs the action and prints the chain's binding after it (as the admin API answers with
    /// `--json`), or the refusal's code.
    static func perform(asJSON: Bool, _ action: (ChainBindingStore) async throws -> ChainActionResult) async -> Int32 {
        await Subsctl.withDatabase { pool in
            // The services' topic when this runs with their settings; otherwise their sweepers
            // re-publish what was replayed.
            let topic = Subsctl.environment["EVENT_TOPIC"].flatMap { $0.isEmpty ? nil : $0 }
            do {
                let result = try await action(ChainBindingStore(pool: pool, topic: topic))
                let binding = result.binding
                try Subsctl.printResult(result, asJSON: asJSON) {
                    "chain=\(binding.environment):\(binding.originalTransactionId) userId=\(binding.userId)"
                        + " source=\(binding.source.rawValue) appAccountToken=\(binding.appleTokenStatus?.rawValue ?? "-")"
                        + (binding.appleTokenTaskId.map { " task=\($0)" } ?? "") + " replayed=\(result.replayedEvents)"
                        + " changed=\(result.changed)"
                }
                return ExitStatus.success
            } catch let refusal as ChainActionRefusal {
                Subsctl.printError("refused: error=\(refusal.code.rawValue) \(refusal.message)")
                return refusal.code == .notFound ? ExitStatus.noInput : ExitStatus.refused
            }
        }
    }
}

/// `subsctl chain attribute`: binds an unowned chain to a user.
enum ChainAttributeCommand: SubsctlCommand {
    static let path = ["chain", "attribute"]
    static let usage =
        "chain attribute --original-transaction-id ID --user-id USER --reason TEXT [--env Production|Sandbox] [--operator NAME] [--json]"
    static let summary =
        "Bind a chain no token attributes (offer codes, existing subscribers) to a user: Set App Account Token at Apple, replay its UNMATCHED_ACCOUNT facts."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        let options: ChainCommandOptions.Parsed
        do { options = try ChainCommandOptions.parse(arguments, userOption: "user-id") } catch {
            return usageError(error.description)
        }
        return await ChainCommandOptions.perform(asJSON: options.asJSON) { store in
            try await store.attribute(
                environment: options.environment, originalTransactionID: options.original, userID: options.userID,
                operator: options.operatorName, reason: options.reason)
        }
    }
}

/// `subsctl chain unfreeze`: resolves an account conflict in favour of one user.
enum ChainUnfreezeCommand: SubsctlCommand {
    static let path = ["chain", "unfreeze"]
    static let usage =
        "chain unfreeze --original-transaction-id ID --owner-user-id USER --reason TEXT [--env Production|Sandbox] [--operator NAME] [--json]"
    static let summary =
        "Resolve an ACCOUNT_CONFLICT freeze in favour of one user (over the facts' tokens) and replay the facts the freeze refused."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        let options: ChainCommandOptions.Parsed
        do { options = try ChainCommandOptions.parse(arguments, userOption: "owner-user-id") } catch {
            return usageError(error.description)
        }
        return await ChainCommandOptions.perform(asJSON: options.asJSON) { store in
            try await store.unfreeze(
                environment: options.environment, originalTransactionID: options.original, ownerUserID: options.userID,
                operator: options.operatorName, reason: options.reason)
        }
    }
}
