import Credits
import Foundation
import Postgres
import ServiceRuntime
import Storage

/// `subsctl lookup`, `subsctl events list|summary`: the support reads of the admin API
/// (`CaseStore`), on `DATABASE_URL`; `--json` prints what the API answers.
enum SupportOutput {
    static func time(_ date: Date?) -> String { date.map { RFC3339.string(from: $0) } ?? "-" }

    static func line(_ event: EventSummary) -> String {
        var line = "event=\(event.eventId) kind=\(event.kind) status=\(event.status)"
        if let code = event.errorCode { line += " error=\(code)" }
        if let type = event.notificationType { line += " type=\(type)" + (event.subtype.map { "/\($0)" } ?? "") }
        if let kind = event.submissionKind { line += " submission=\(kind) user=\(event.userId ?? "-")" }
        if let original = event.originalTransactionId { line += " chain=\(event.environment):\(original)" }
        return line + " attempts=\(event.attempts) received=\(time(event.receivedAt))"
    }
}

enum LookupCommand: SubsctlCommand {
    static let path = ["lookup"]
    static let usage = "lookup ID [--json]"
    static let summary =
        "Find a userId, orderNo, transactionId, originalTransactionId, notificationUUID or appAccountToken and print its case: who, chains, credits, then the timeline."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let asJSON = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.count == 1, let q = arguments.positionals.first, (1...200).contains(q.count) else {
            return usageError("give one id of 1 to 200 characters")
        }
        return await Subsctl.withDatabase { pool in
            guard let found = try await CaseStore(pool: pool).lookup(q, now: Date()) else {
                Subsctl.printError("nothing has the id \(q)")
                return ExitStatus.refused
            }
            try Subsctl.printResult(found, asJSON: asJSON) { text(found) }
            return ExitStatus.success
        }
    }

    static func text(_ found: CaseLookup) -> String {
        let c = found.supportCase
        var text = "matches: " + found.matches.map { "\($0.kind)=\($0.id)" }.joined(separator: " ") + "\n"
        if let user = c.user {
            text += "user=\(user.userId) testUser=\(user.isTestUser) appAccountTokens=\(user.appAccountTokens.joined(separator: ","))\n"
        } else {
            text += "user=- (no user owns it yet)\n"
        }
        for chain in c.chains {
            text +=
                "chain=\(chain.environment):\(chain.originalTransactionId) status=\(chain.status ?? "-")"
                + " product=\(chain.activeProductId ?? "-") expires=\(SupportOutput.time(chain.expiresAt))"
                + " owner=\(chain.userId ?? chain.binding?.userId ?? "-")"
                + (chain.frozenReason.map { " frozen=\($0)" } ?? "") + "\n"
        }
        for balance in c.balances { text += "credits \(balance.pool)=\(CreditAmount.decimal(balance.balance))\n" }
        text += "timeline:\n"
        for item in c.timeline {
            text += "  \(SupportOutput.time(item.at))  \(item.kind) \(item.id)  \(item.summary)\n"
        }
        return text
    }
}

enum EventsListCommand: SubsctlCommand {
    static let path = ["events", "list"]
    static let usage = "events list [--status STATUS] [--code ERROR_CODE] [--limit N] [--before-id ID] [--json]"
    static let summary =
        "List events newest first (RECEIVED, PROCESSING, RETRY_WAIT, SUCCEEDED or DEAD; by error code); --before-id pages on."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let status = arguments.option("status")
        let code = arguments.option("code")
        let limitText = arguments.option("limit")
        let beforeText = arguments.option("before-id")
        let asJSON = arguments.flag("json")
        if let status = unusedArgumentsError(arguments) { return status }
        let statuses = ["RECEIVED", "PROCESSING", "RETRY_WAIT", "SUCCEEDED", "DEAD"]
        if let status, !statuses.contains(status) {
            return usageError("--status must be one of \(statuses.joined(separator: ", "))")
        }
        guard let limit = Int(limitText ?? "50"), (1...1000).contains(limit) else {
            return usageError("--limit must be a whole number from 1 to 1000")
        }
        let before = beforeText.flatMap { Int64($0) }
        if beforeText != nil && before == nil { return usageError("--before-id must be an event id") }
        return await Subsctl.withDatabase { pool in
            let events = try await CaseStore(pool: pool).events(status: status, errorCode: code, beforeID: before, limit: limit)
            if events.isEmpty && !asJSON {
                Subsctl.printError("no such events")
            } else {
                try Subsctl.printItems(events, asJSON: asJSON, line: SupportOutput.line)
            }
            return ExitStatus.success
        }
    }
}

enum EventsSummaryCommand: SubsctlCommand {
    static let path = ["events", "summary"]
    static let usage = "events summary [--json]"
    static let summary = "Count events by status and error code, with the age of the oldest of each."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let asJSON = arguments.flag("json")
        if let status = unusedArgumentsError(arguments) { return status }
        return await Subsctl.withDatabase { pool in
            let counts = try await CaseStore(pool: pool).eventSummary(now: Date())
            try Subsctl.printItems(counts, asJSON: asJSON) {
                "status=\($0.status) errorCode=\($0.errorCode ?? "-") count=\($0.count) oldestAgeSeconds=\($0.oldestAgeSeconds)"
            }
            return ExitStatus.success
        }
    }
}

/// `subsctl chain requery`: `subsctl requery` under the chain commands.
enum ChainRequeryCommand: SubsctlCommand {
    static let path = ["chain", "requery"]
    static let usage = "chain " + RequeryCommand.usage
    static let summary = RequeryCommand.summary + " (also `subsctl requery`)"

    static func run(_ arguments: ParsedArguments) async -> Int32 { await RequeryCommand.run(arguments) }
}
