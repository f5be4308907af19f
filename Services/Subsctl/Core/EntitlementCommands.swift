import Domain
import Foundation
import Postgres
import ServiceRuntime
import Storage

/// `subsctl entitlements grant|revoke|show`: promotional grants of entitlements (access, not
/// credits), the same store calls as the admin API's, each audited under `--operator`.
enum EntitlementCommands {
    /// What grant and revoke both take: `--user-id` and `--entitlement`, and who and why for the
    /// audit row (`--operator`, `--reason`); read with the command's options, checked after them.
    struct AuditedTarget {
        let user: String?
        let entitlement: String?
        let operatorName: String?
        let reason: String?

        init(_ arguments: inout ParsedArguments) {
            user = arguments.userID()
            entitlement = arguments.option("entitlement")
            operatorName = arguments.option("operator")
            reason = arguments.option("reason")
        }

        /// The four present and well-formed.
        struct Checked {
            let user: String
            let entitlement: String
            let operatorName: String
            let reason: String
        }

        /// The four, the user and entitlement checked as the admin API checks its path.
        func checked() throws(UsageProblem) -> Checked {
            guard let user, (1...128).contains(user.count) else { throw UsageProblem("--user-id must be a user id of 1 to 128 characters") }
            guard let entitlement, Entitlements.isIdentifier(entitlement) else {
                throw UsageProblem("--entitlement must be an identifier of [a-z0-9_.-], 1 to 64 characters")
            }
            guard let operatorName, !operatorName.isEmpty else { throw UsageProblem("--operator is required") }
            guard let reason, !reason.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else {
                throw UsageProblem("--reason is required: say why, for the audit trail")
            }
            return Checked(user: user, entitlement: entitlement, operatorName: operatorName, reason: reason)
        }
    }

    struct UsageProblem: Error {
        let message: String
        init(_ message: String) { self.message = message }
    }

    /// One line per grant for people.
    static func line(_ grant: PromotionalGrantView) -> String {
        var text =
            "grant \(grant.grantId) user=\(grant.userId) entitlement=\(grant.entitlement) until \(RFC3339.string(from: grant.expiresAt)) by \(grant.grantedBy) (\(grant.reason))"
        if let revokedAt = grant.revokedAt {
            text += " revoked \(RFC3339.string(from: revokedAt)) by \(grant.revokedBy ?? "?") (\(grant.revokeReason ?? ""))"
        } else if grant.endedAt != nil || !grant.inForce {
            text += " ended"
        } else {
            text += " in force"
        }
        return text
    }
}

/// `subsctl entitlements grant`: gives a user an entitlement until a time or for a duration.
enum EntitlementGrantCommand: SubsctlCommand {
    static let path = ["entitlements", "grant"]
    static let usage =
        "entitlements grant --user-id ID --entitlement NAME (--expires-at RFC3339 | --duration P7D) --operator NAME --reason TEXT [--json]"
    static let summary =
        "Grant an entitlement promotionally (access, not credits) until --expires-at or for --duration (ISO 8601), audited; it ends by itself."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let audited = EntitlementCommands.AuditedTarget(&arguments)
        let expiresText = arguments.option("expires-at")
        let duration = arguments.option("duration")
        let asJSON = arguments.flag("json")
        if let status = unusedArgumentsError(arguments, refusal: { _ in "no positional arguments" }) { return status }
        let target: EntitlementCommands.AuditedTarget.Checked
        do { target = try audited.checked() } catch { return usageError(error.message) }
        var expiresAt: Date?
        if let expiresText {
            guard let date = RFC3339.date(from: expiresText) else { return usageError("--expires-at must be an RFC 3339 time") }
            expiresAt = date
        }
        let now = Date()
        let end: Date
        do {
            end = try Entitlements.grantEnd(expiresAt: expiresAt, duration: duration, now: now)
        } catch {
            switch error {
            case .endOrDuration: return usageError("give either --expires-at or --duration, not both")
            case .badDuration: return usageError("--duration must be a positive ISO 8601 duration such as P7D, P1M or PT12H")
            case .notInFuture:
                Subsctl.printError("EXPIRY_NOT_IN_FUTURE: the end must be in the future; nothing granted")
                return ExitStatus.refused
            case .tooLong:
                Subsctl.printError("GRANT_TOO_LONG: a promotional grant lasts at most ten years; nothing granted")
                return ExitStatus.refused
            }
        }
        // A grant's events carry the deployment's environment, as the ingress's do.
        let environment = Subsctl.environment["APPLE_IAP_ENV"] ?? "Production"
        return await Subsctl.withDatabase { pool in
            do {
                let grant = try await EntitlementStore(pool: pool).grant(
                    userID: target.user, entitlement: target.entitlement, expiresAt: end, environment: environment,
                    operator: target.operatorName, reason: target.reason, now: now)
                let view = PromotionalGrantView(grant, now: Date())
                try Subsctl.printResult(view, asJSON: asJSON) { EntitlementCommands.line(view) }
                return ExitStatus.success
            } catch EntitlementGrantError.unknownUser(let user) {
                Subsctl.printError("no user \(user): nothing granted")
                return ExitStatus.refused
            }
        }
    }
}

/// `subsctl entitlements revoke`: ends now every grant of the entitlement to the user in force.
enum EntitlementRevokeCommand: SubsctlCommand {
    static let path = ["entitlements", "revoke"]
    static let usage = "entitlements revoke --user-id ID --entitlement NAME --operator NAME --reason TEXT [--json]"
    static let summary = "Revoke now the user's promotional grants of an entitlement that are in force, audited."

    /// The `--json` answer, the admin API's.
    struct Output: Encodable {
        var userId: String
        var entitlement: String
        var revoked: [PromotionalGrantView]
    }

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let audited = EntitlementCommands.AuditedTarget(&arguments)
        let asJSON = arguments.flag("json")
        if let status = unusedArgumentsError(arguments, refusal: { _ in "no positional arguments" }) { return status }
        let target: EntitlementCommands.AuditedTarget.Checked
        do { target = try audited.checked() } catch { return usageError(error.message) }
        return await Subsctl.withDatabase { pool in
            do {
                let revoked = try await EntitlementStore(pool: pool).revoke(
                    userID: target.user, entitlement: target.entitlement, operator: target.operatorName, reason: target.reason,
                    now: Date())
                let now = Date()
                let output = Output(
                    userId: target.user, entitlement: target.entitlement, revoked: revoked.map { PromotionalGrantView($0, now: now) })
                try Subsctl.printResult(output, asJSON: asJSON) { output.revoked.map(EntitlementCommands.line).joined(separator: "\n") }
                return ExitStatus.success
            } catch EntitlementGrantError.nothingInForce(let user, let entitlement) {
                Subsctl.printError("GRANT_NOT_FOUND: user \(user) has no promotional grant of \(entitlement) in force")
                return ExitStatus.refused
            }
        }
    }
}

/// `subsctl entitlements show`: what a user may use now, in words, and their promotional grants.
enum EntitlementShowCommand: SubsctlCommand {
    static let path = ["entitlements", "show"]
    static let usage = "entitlements show --user-id ID [--json]"
    static let summary = "Print a user's entitlements now (in words and one line each) and every promotional grant they had."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let user = arguments.userID()
        let asJSON = arguments.flag("json")
        if let status = unusedArgumentsError(arguments, refusal: { _ in "no positional arguments" }) { return status }
        guard let user, (1...128).contains(user.count) else { return usageError("--user-id must be a user id of 1 to 128 characters") }
        return await Subsctl.withDatabase { pool in
            let overview = try await EntitlementStore(pool: pool).overview(userID: user, now: Date())
            try Subsctl.printResult(overview, asJSON: asJSON) {
                var lines = ["user=\(user): \(overview.summary)"]
                for item in overview.entitlements {
                    lines.append(
                        "entitlement \(item.entitlement) \(item.active ? "active" : "inactive") source=\(item.source.rawValue)"
                            + (item.status.map { " status=\($0.rawValue)" } ?? "") + (item.productID.map { " product=\($0)" } ?? "")
                            + (item.expiresAt.map { " expires=\(RFC3339.string(from: $0))" } ?? ""))
                }
                lines += overview.grants.map(EntitlementCommands.line)
                return lines.joined(separator: "\n")
            }
            return ExitStatus.success
        }
    }
}
