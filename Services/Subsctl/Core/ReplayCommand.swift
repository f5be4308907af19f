import Foundation
import Postgres
import Storage

/// `subsctl replay`: puts every DEAD event with an error code back to processing after the cause
/// was fixed (a product added for `UNMATCHED_PRODUCT`, a user for `UNMATCHED_ACCOUNT`, a frozen
/// chain cleared), with an audit row. The sweeper re-publishes them; applying is idempotent.
enum ReplayCommand: SubsctlCommand {
    static let path = ["replay"]
    static let usage = "replay --error-code CODE [--reason TEXT] [--operator NAME] [--json]"
    static let summary = "Replay the DEAD events with this error code (e.g. UNMATCHED_PRODUCT after adding the product); print how many."

    /// The `--json` answer, the admin API's.
    struct Output: Encodable {
        var errorCode: String
        var replayed: Int
    }

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let code = arguments.option("error-code")
        let reason = arguments.option("reason") ?? "cause fixed"
        let operatorName = arguments.operatorName()
        let asJSON = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        guard let code, (1...64).contains(code.utf8.count),
            code.utf8.allSatisfy({ (0x41...0x5A).contains($0) || (0x30...0x39).contains($0) || $0 == UInt8(ascii: "_") })
        else { return usageError("--error-code must be an error code such as UNMATCHED_PRODUCT") }
        return await Subsctl.withDatabase { pool in
            Subsctl.printProgress("replaying the DEAD events with error code \(code)…")
            let replayed = try await EventStore(pool: pool, topic: "").replayDead(
                errorCode: code, operator: operatorName, reason: reason)
            try Subsctl.printResult(Output(errorCode: code, replayed: replayed), asJSON: asJSON) { "replayed=\(replayed) errorCode=\(code)" }
            return ExitStatus.success
        }
    }
}
