import AppStore
import AppleOperations
import Foundation
import ServiceRuntime
import Storage

/// `subsctl apple extend-all`: Extend Subscription Renewal Dates for All Active Subscribers of a
/// product (compensation after an outage), then Apple's progress until it is complete. The
/// request is recorded first and audited; the same command run again follows the request Apple
/// already accepted instead of extending everyone twice.
enum AppleExtendAllCommand: SubsctlCommand {
    static let path = ["apple", "extend-all"]
    static let usage =
        "apple extend-all --product ID --days 1-90 --reason TEXT [--reason-code 0-3] [--storefronts USA,FRA,…] [--request-id UUID]"
        + " [--no-wait] [--poll-seconds N] [--env Production|Sandbox] [--operator NAME] [--json]"
    static let summary =
        "Extend the renewal date of every active subscriber of a product at Apple (reason code default 3, service issue) and"
        + " follow Apple's progress; audited, and a second run of the same request does not extend again."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let product = arguments.option("product")
        let daysText = arguments.option("days")
        let reasonCodeText = arguments.option("reason-code")
        let reason = arguments.option("reason")
        let storefronts = arguments.option("storefronts")
        let requestIdText = arguments.option("request-id")
        let noWait = arguments.flag("no-wait")
        let pollText = arguments.option("poll-seconds")
        let environment = arguments.option("env")
        let asJSON = arguments.flag("json")
        let operatorName = arguments.operatorName()
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        guard let product else { return usageError("--product is required") }
        guard let days = daysText.flatMap({ Int32($0) }) else { return usageError("--days must be 1 to 90 (Apple's limit)") }
        guard let reasonCode = Int32(reasonCodeText ?? "3") else { return usageError("--reason-code must be 0, 1, 2 or 3") }
        guard let reason else { return usageError("--reason is required: say why, for the audit trail") }
        var requestIdentifier: UUID?
        if let requestIdText {
            guard let parsed = UUID(uuidString: requestIdText) else { return usageError("--request-id must be a UUID") }
            requestIdentifier = parsed
        }
        guard let pollSeconds = Int(pollText ?? "30"), (1...3600).contains(pollSeconds) else {
            return usageError("--poll-seconds must be 1 to 3600")
        }
        let client: AppStoreServerAPIClient
        switch AppleAPIAccess.client(environment: environment) {
        case .success(let made): client = made
        case .failure(let exit): return exit.status
        }
        return await Subsctl.withDatabase { pool in
            let extensions = MassRenewalExtension(client: client, store: AppleRenewalExtensionStore(pool: pool))
            let submission: MassRenewalExtension.Submission
            do {
                let request = try extensions.request(
                    productId: product, extendByDays: days, extendReasonCode: reasonCode,
                    storefrontCountryCodes: storefronts.map { $0.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } },
                    reason: reason, requestedBy: operatorName, requestIdentifier: requestIdentifier)
                submission = try await extensions.submit(request)
            } catch let refusal as MassRenewalExtension.Refusal {
                return failed(refusal)
            }
            var record = submission.record
            let identifier = record.request.requestIdentifier.uuidString.lowercased()
            Subsctl.printProgress(
                submission.sent
                    ? "Apple accepted request \(identifier) for \(record.request.productId)"
                    : "request \(identifier) was accepted by Apple on an earlier run (\(record.submittedAt.map { RFC3339.string(from: $0) } ?? "-")): following it, not sending it again"
            )
            while !noWait {
                do {
                    record = try await extensions.refresh(record.request.requestIdentifier) ?? record
                } catch MassRenewalExtension.Refusal.apple(let error) where error.isRetryable {
                    Subsctl.printProgress("Apple's status is unavailable for now (\(error)), asking again")
                } catch let refusal as MassRenewalExtension.Refusal {
                    return failed(refusal)
                }
                if record.complete { break }
                Subsctl.printProgress("request \(identifier): in progress (Apple reports no counts before completion)")
                try await Task.sleep(for: .seconds(pollSeconds))
            }
            try Subsctl.printResult(RenewalExtensionSummary(record, sent: submission.sent), asJSON: asJSON) {
                "requestIdentifier=\(identifier) productId=\(record.request.productId) complete=\(record.complete)"
                    + " succeeded=\(record.succeededCount.map(String.init) ?? "-") failed=\(record.failedCount.map(String.init) ?? "-")"
                    + " completeDate=\(record.completeDate.map { RFC3339.string(from: $0) } ?? "-")"
            }
            return ExitStatus.success
        }
    }

    /// The exit status of a refusal, after printing it.
    static func failed(_ refusal: MassRenewalExtension.Refusal) -> Int32 {
        switch refusal {
        case .invalid(let message): return usageError(message)
        case .identifierInUse(let record):
            Subsctl.printError(
                "request \(record.request.requestIdentifier.uuidString.lowercased()) was used for another extension"
                    + " (\(record.request.productId), \(record.request.extendByDays) days): choose another --request-id")
            return ExitStatus.refused
        case .apple(let error): return AppleAPIAccess.failed(error)
        }
    }
}
