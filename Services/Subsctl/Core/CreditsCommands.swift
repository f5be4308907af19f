import Credits
import Domain
import Foundation
import Postgres
import ServiceRuntime

/// `subsctl rates apply`: loads the rate versions of a rates file (format: README, "Credits") into
/// the database of `DATABASE_URL`, one audit row per new version.
enum RatesApplyCommand: SubsctlCommand {
    static let path = ["rates", "apply"]
    static let usage = "rates apply [--operator NAME] [--reason TEXT] [--json] FILE"
    static let summary = "Insert the new rate versions of FILE into DATABASE_URL (stored versions never change); print what changed."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let operatorName = arguments.operatorName()
        let reason = arguments.option("reason")
        let asJSON = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.count == 1 else { return usageError("give exactly one FILE") }
        let path = arguments.positionals[0]
        let file: RatesFile
        do { file = try RatesFile.load(path: path) } catch {
            Subsctl.printError("\(path) refused, nothing applied:\n\(error.description)")
            return ExitStatus.refused
        }
        return await Subsctl.withDatabase { pool in
            let result = try await CreditRates(pool: pool).apply(
                file, operator: operatorName, reason: reason ?? "subsctl rates apply \(URL(fileURLWithPath: path).lastPathComponent)")
            try Subsctl.printResult(["inserted": result.inserted, "unchanged": result.unchanged], asJSON: asJSON) {
                let lines = result.inserted.map { "inserted \($0)" } + result.unchanged.map { "unchanged \($0)" }
                return (lines + ["inserted=\(result.inserted.count) unchanged=\(result.unchanged.count)"]).joined(separator: "\n")
            }
            return ExitStatus.success
        }
    }
}

/// `subsctl credits run-jobs`: runs the credit jobs once, as the workers' scheduler does (safe
/// beside them): welcome credits, yearly months, the daily close of every past day, expiry clearing.
enum CreditsRunJobsCommand: SubsctlCommand {
    static let path = ["credits", "run-jobs"]
    static let usage = "credits run-jobs [--now RFC3339] [--welcome-credits N] [--app-key BUNDLE_ID] [--json]"
    static let summary =
        "Run the credit jobs once against DATABASE_URL for the instant --now (default: now); print what they did and how long."

    /// The `--json` answer: what each job did, how long they took, and the ledger check after them.
    struct Output: Encodable {
        var welcomeGrants: Int
        var monthlyGrants: Int
        var billsClosed: Int
        var poolsCleared: Int
        var seconds: Double
        var ledgerMismatches: Int
    }

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let nowText = arguments.option("now")
        let welcome = arguments.option("welcome-credits")
        let appKey = arguments.option("app-key") ?? Subsctl.environment["APPLE_IAP_BUNDLE_ID"] ?? ""
        let asJSON = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("no positional arguments") }
        guard let now = nowText.map({ RFC3339.date(from: $0) }) ?? Date() else { return usageError("--now must be an RFC 3339 time") }
        guard let welcomeCredits = Int64(welcome ?? "0"), welcomeCredits >= 0 else {
            return usageError("--welcome-credits must be a whole number")
        }
        guard let limits = Subsctl.creditLimits() else { return ExitStatus.configuration }
        return await Subsctl.withDatabase { pool in
            let jobs = CreditJobs(
                pool: pool, appKey: appKey, configuration: CreditsConfiguration(welcomeCredits: welcomeCredits, limits: limits),
                logger: Subsctl.logger)
            Subsctl.printProgress("running the credit jobs (welcome, yearly grants, daily close, expiry clearing)…")
            let started = ContinuousClock.now
            let report = try await jobs.runAll(now: now)
            let seconds = Double((ContinuousClock.now - started) / .milliseconds(1)) / 1000
            Subsctl.printProgress("checking every balance against its ledger…")
            let violations = try await jobs.checkInvariant()
            let output = Output(
                welcomeGrants: report.welcomeGrants, monthlyGrants: report.monthlyGrants, billsClosed: report.billsClosed,
                poolsCleared: report.poolsCleared, seconds: seconds, ledgerMismatches: violations)
            try Subsctl.printResult(output, asJSON: asJSON) {
                """
                welcome_grants=\(report.welcomeGrants) monthly_grants=\(report.monthlyGrants) \
                bills_closed=\(report.billsClosed) pools_cleared=\(report.poolsCleared) seconds=\(seconds) \
                ledger_mismatches=\(violations)
                """
            }
            return ExitStatus.success
        }
    }
}

/// `subsctl credits adjust`: an operator's manual adjustment of one pool, credit or debit, once per
/// adjustment number (a retry books nothing and prints the first result).
enum CreditsAdjustCommand: SubsctlCommand {
    static let path = ["credits", "adjust"]
    static let usage =
        "credits adjust --user-id ID --pool SUBSCRIPTION|WELCOME|PERMANENT --amount CREDITS --number ADJUSTMENT_NO --operator NAME --reason TEXT [--json]"
    static let summary =
        "Credit (positive --amount, e.g. 3) or debit (negative, e.g. -2.5; never below zero, the rest recorded as unrecoverable) a pool in DATABASE_URL, once per --number."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let values = [("user-id", arguments.userID())] + ["pool", "amount", "number", "operator", "reason"].map { ($0, arguments.option($0)) }
        let asJSON = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("no positional arguments") }
        if let missing = values.first(where: { $0.1?.isEmpty ?? true }) { return usageError("--\(missing.0) is required") }
        let option = Dictionary(uniqueKeysWithValues: values.map { ($0.0, $0.1 ?? "") })
        guard let pool = CreditPool(rawValue: option["pool", default: ""]) else {
            return usageError("--pool must be SUBSCRIPTION, WELCOME or PERMANENT")
        }
        guard let amount = CreditAmount.micro(option["amount", default: ""]), amount != 0, amount != .min else {
            return usageError("--amount must be a non-zero decimal number of credits with at most 6 decimals (e.g. 3 or -2.5)")
        }
        guard let limits = Subsctl.creditLimits() else { return ExitStatus.configuration }
        return await Subsctl.withDatabase { database in
            do {
                let result = try await CreditLedger(pool: database).adjust(
                    userID: option["user-id", default: ""], pool: pool, amount: amount, adjustmentNo: option["number", default: ""],
                    operator: option["operator", default: ""], reason: option["reason", default: ""], limits: limits)
                try Subsctl.printResult(Output(result), asJSON: asJSON) { line(result) }
                return ExitStatus.success
            } catch CreditAdjustmentError.unknownUser(let user) {
                Subsctl.printError("no user \(user): nothing booked")
                return ExitStatus.refused
            } catch CreditAdjustmentError.amountOutOfRange(let problem) {
                Subsctl.printError("AMOUNT_OUT_OF_RANGE: \(problem); nothing booked")
                return ExitStatus.refused
            } catch CreditAdjustmentError.numberUsedForAnother(let first) {
                Subsctl.printError("adjustment number \(first.adjustmentNo) was used for another adjustment, nothing booked: \(line(first))")
                return ExitStatus.refused
            }
        }
    }

    /// The `--json` answer, the admin API's: amounts as decimal strings of credits.
    struct Output: Encodable {
        var adjustmentNo: String
        var userId: String
        var pool: String
        var amount: String
        var applied: String
        var unrecoverable: String
        var balanceAfter: String
        /// False when this number was booked before: nothing new was, this is the first result.
        var booked: Bool

        init(_ result: CreditAdjustment) {
            adjustmentNo = result.adjustmentNo
            userId = result.userID
            pool = result.pool.rawValue
            amount = CreditAmount.decimal(result.amount)
            applied = CreditAmount.decimal(result.applied)
            unrecoverable = CreditAmount.decimal(result.unrecoverable)
            balanceAfter = CreditAmount.decimal(result.balanceAfter)
            booked = result.booked
        }
    }

    /// One line an operator reads and a script parses.
    static func line(_ result: CreditAdjustment) -> String {
        """
        \(result.booked ? "adjusted" : "already adjusted, nothing booked:") adjustment=\(result.adjustmentNo) \
        user=\(result.userID) pool=\(result.pool.rawValue) amount=\(CreditAmount.decimal(result.amount)) \
        applied=\(CreditAmount.decimal(result.applied)) unrecoverable=\(CreditAmount.decimal(result.unrecoverable)) \
        balance_after=\(CreditAmount.decimal(result.balanceAfter))
        """
    }
}

extension Subsctl {
    /// `CREDITS_MAX_BALANCE` and `CREDITS_MAX_ADJUSTMENT` as the services read them; nil (printed)
    /// when a setting is invalid.
    static func creditLimits() -> CreditLimits? {
        let reader = ConfigurationReader(environment: environment)
        let limits = CreditLimits(reader: reader)
        guard reader.problems.isEmpty else {
            for problem in reader.problems { printError("\(problem)") }
            return nil
        }
        return limits
    }
}
