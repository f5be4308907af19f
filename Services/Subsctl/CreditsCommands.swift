import Credits
import Foundation
import Postgres
import ServiceRuntime

/// `subsctl rates apply`: loads the rate versions of a rates file (format: README, "Credits") into
/// the database of `DATABASE_URL`, one audit row per new version.
enum RatesApplyCommand: SubsctlCommand {
    static let path = ["rates", "apply"]
    static let usage = "rates apply [--operator NAME] [--reason TEXT] FILE"
    static let summary = "Insert the new rate versions of FILE into DATABASE_URL (stored versions never change); print what changed."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let environment = ProcessInfo.processInfo.environment
        let operatorName = arguments.option("operator") ?? environment["USER"] ?? "subsctl"
        let reason = arguments.option("reason")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.count == 1 else { return usageError("give exactly one FILE") }
        let path = arguments.positionals[0]
        let file: RatesFile
        do { file = try RatesFile.load(path: path) } catch {
            Subsctl.printError("\(path) refused, nothing applied:\n\(error.description)")
            return ExitStatus.refused
        }
        return await Subsctl.withDatabase { pool in
            let result = try await CreditRates.apply(
                file, operator: operatorName, reason: reason ?? "subsctl rates apply \(URL(fileURLWithPath: path).lastPathComponent)",
                pool: pool)
            let lines = result.inserted.map { "inserted \($0)" } + result.unchanged.map { "unchanged \($0)" }
            Subsctl.printOutput((lines + ["inserted=\(result.inserted.count) unchanged=\(result.unchanged.count)"]).joined(separator: "\n"))
            return ExitStatus.success
        }
    }
}

/// `subsctl credits run-jobs`: runs the credit jobs once, as the workers' scheduler does (safe
/// beside them): welcome credits, yearly months, the daily close of every past day, expiry clearing.
enum CreditsRunJobsCommand: SubsctlCommand {
    static let path = ["credits", "run-jobs"]
    static let usage = "credits run-jobs [--now RFC3339] [--welcome-credits N] [--app-key BUNDLE_ID]"
    static let summary =
        "Run the credit jobs once against DATABASE_URL for the instant --now (default: now); print what they did and how long."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let nowText = arguments.option("now")
        let welcome = arguments.option("welcome-credits")
        let appKey = arguments.option("app-key") ?? ProcessInfo.processInfo.environment["APPLE_IAP_BUNDLE_ID"] ?? ""
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("no positional arguments") }
        guard let now = nowText.map({ RFC3339.date(from: $0) }) ?? Date() else { return usageError("--now must be an RFC 3339 time") }
        guard let welcomeCredits = Int64(welcome ?? "0"), welcomeCredits >= 0 else {
            return usageError("--welcome-credits must be a whole number")
        }
        return await Subsctl.withDatabase { pool in
            let jobs = CreditJobs(
                pool: pool, appKey: appKey, configuration: CreditsConfiguration(welcomeCredits: welcomeCredits),
                logger: Subsctl.logger)
            let started = ContinuousClock.now
            let report = try await jobs.runAll(now: now)
            let seconds = Double((ContinuousClock.now - started) / .milliseconds(1)) / 1000
            let violations = try await jobs.checkInvariant()
            Subsctl.printOutput(
                """
                welcome_grants=\(report.welcomeGrants) yearly_grants=\(report.yearlyGrants) \
                bills_closed=\(report.billsClosed) pools_cleared=\(report.poolsCleared) seconds=\(seconds) \
                ledger_mismatches=\(violations)
                """)
            return ExitStatus.success
        }
    }
}
