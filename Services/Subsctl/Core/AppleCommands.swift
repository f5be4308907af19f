import AppStore
import Domain
import Foundation
import ServiceRuntime
import Storage

/// What the `subsctl apple` commands share: the App Store Server API client of the `APPLE_IAP_*`
/// settings (the workers' key), for the environment `--env` names or the configured one.
enum AppleAPIAccess {
    /// The client, or the exit status after printing why there is none.
    static func client(environment name: String?) -> Result<AppStoreServerAPIClient, ExitCode> {
        var configuration: AppStoreServerAPIConfiguration
        do { configuration = try AppStoreServerAPIConfiguration(environment: Subsctl.environment) } catch {
            Subsctl.printError("the App Store Server API key is not configured:\n\(error)")
            return .failure(ExitCode(ExitStatus.configuration))
        }
        if let name {
            guard let environment = [AppStoreEnvironment.production, .sandbox].first(where: { $0.rawValue.lowercased() == name.lowercased() })
            else {
                Subsctl.printError("--env must be Production or Sandbox")
                return .failure(ExitCode(ExitStatus.usage))
            }
            configuration.environment = environment
        }
        return .success(AppStoreServerAPIClient(configuration: configuration, logger: Subsctl.logger))
    }

    /// An exit status carried through `Result`.
    struct ExitCode: Error {
        let status: Int32
        init(_ status: Int32) { self.status = status }
    }

    /// The exit status of a failed API call, after printing it.
    static func failed(_ error: AppStoreAPIError) -> Int32 {
        Subsctl.printError("Apple refused: \(error)")
        return error.isRetryable ? ExitStatus.temporaryFailure : ExitStatus.refused
    }
}

/// `subsctl apple test-notification`: Apple's own end-to-end check of the webhook. Requests a
/// TEST notification, follows Get Test Notification Status until Apple has tried to deliver it,
/// and looks the TEST event up in the database (when `DATABASE_URL` is set).
enum AppleTestNotificationCommand: SubsctlCommand {
    static let path = ["apple", "test-notification"]
    static let usage = "apple test-notification [--env Production|Sandbox] [--wait SECONDS] [--json]"
    static let summary =
        "Ask Apple to send a TEST notification; print Apple's delivery attempts and whether the TEST event was stored."

    /// The `--json` answer, printed once it is all known.
    struct Output: Encodable {
        struct Attempt: Encodable {
            var attemptDate: Date?
            var sendAttemptResult: String?
        }
        var testNotificationToken: String
        var attempts: [Attempt]
        var delivered: Bool
        var notificationUUID: String?
        /// Absent when it cannot be looked for (no DATABASE_URL or no notification UUID).
        var stored: Bool?
        var status: String?
    }

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let environment = arguments.option("env")
        let wait = FulfillmentTaskRequest.waitSeconds(arguments.option("wait") ?? "60")
        let asJSON = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        guard let wait else { return usageError("--wait must be a whole number of seconds from 0 to 86400") }
        let client: AppStoreServerAPIClient
        switch AppleAPIAccess.client(environment: environment) {
        case .success(let made): client = made
        case .failure(let exit): return exit.status
        }
        let token: String
        do throws(AppStoreAPIError) {
            guard let issued = try await client.requestTestNotification().testNotificationToken else {
                Subsctl.printError("Apple answered without a test notification token")
                return ExitStatus.temporaryFailure
            }
            token = issued
        } catch { return AppleAPIAccess.failed(error) }
        // The token as soon as Apple gives it: the operator may look for it in the logs meanwhile.
        if !asJSON { Subsctl.printOutput("testNotificationToken=\(token)") }

        // Apple answers "not found" until it has tried to send it.
        let deadline = ContinuousClock.now + .seconds(wait)
        var status: CheckTestNotificationResponse?
        while status == nil {
            do throws(AppStoreAPIError) {
                let answer = try await client.getTestNotificationStatus(testNotificationToken: token)
                if !(answer.sendAttempts ?? []).isEmpty { status = answer }
            } catch  where error.apiError == .testNotificationNotFound {
            } catch { return AppleAPIAccess.failed(error) }
            if status != nil { break }
            guard ContinuousClock.now < deadline else {
                Subsctl.printError("Apple has not tried to deliver it within \(wait) s")
                return ExitStatus.temporaryFailure
            }
            try? await Task.sleep(for: .seconds(1))
        }
        let attempts = status?.sendAttempts ?? []
        let delivered = attempts.last?.sendAttemptResult == "SUCCESS"
        // The UUID only names the row to look for; the webhook verified the payload when it came.
        let uuid = status?.signedPayload.flatMap { (JWSParts($0)?.payloadJSON as? [String: Any])?["notificationUUID"] as? String }
        var output = Output(
            testNotificationToken: token, attempts: attempts.map { .init(attemptDate: $0.attemptDate, sendAttemptResult: $0.sendAttemptResult) },
            delivered: delivered, notificationUUID: uuid)
        let attemptLines = attempts.map {
            "attempt=\($0.attemptDate.map { RFC3339.string(from: $0) } ?? "-") result=\($0.sendAttemptResult ?? "-")"
        }
        guard let uuid, Subsctl.environment["DATABASE_URL"] != nil else {
            do {
                try Subsctl.printResult(output, asJSON: asJSON) {
                    (attemptLines + ["delivered=\(delivered) stored=unknown (no DATABASE_URL or no notification UUID)"]).joined(separator: "\n")
                }
            } catch {
                Subsctl.printError("\(error)")
                return ExitStatus.refused
            }
            return delivered ? ExitStatus.success : ExitStatus.refused
        }
        return await Subsctl.withDatabase { pool in
            let events = EventStore(pool: pool, topic: "")
            var stored = try await events.status(ofNotification: uuid)
            while stored == nil, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(500))
                stored = try await events.status(ofNotification: uuid)
            }
            output.stored = stored != nil
            output.status = stored?.status
            try Subsctl.printResult(output, asJSON: asJSON) {
                (attemptLines + ["delivered=\(delivered) notificationUUID=\(uuid) stored=\(stored != nil)"]).joined(separator: "\n")
                    + (stored.map { " status=\($0.status)" } ?? "")
            }
            return delivered && stored != nil ? ExitStatus.success : ExitStatus.refused
        }
    }
}

/// `subsctl apple extend`: Extend a Subscription Renewal Date (a goodwill gesture or an outage),
/// with an audit row of what was asked and what Apple answered.
enum AppleExtendCommand: SubsctlCommand {
    static let path = ["apple", "extend"]
    static let usage =
        "apple extend --original-transaction-id ID --days 1-90 --reason-code 0-3 --reason TEXT [--env Production|Sandbox] [--operator NAME] [--json]"
    static let summary =
        "Extend one subscription's renewal date at Apple (reason code 0 undeclared, 1 customer satisfaction, 2 other, 3 service issue); audited."

    struct Asked: Encodable, Sendable {
        var originalTransactionId: String
        var extendByDays: Int32
        var extendReasonCode: Int32
        var requestIdentifier: String
    }

    struct Answered: Encodable, Sendable {
        var success: Bool?
        var effectiveDate: Date?
        var webOrderLineItemId: String?
        var error: String?
    }

    /// The `--json` answer: what Apple answered for the chain.
    struct Output: Encodable {
        var originalTransactionId: String
        var success: Bool
        var effectiveDate: Date?
        var webOrderLineItemId: String?
    }

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let original = arguments.option("original-transaction-id")
        let asJSON = arguments.flag("json")
        let days = arguments.option("days").flatMap { Int32($0) }
        let reasonCode = arguments.option("reason-code").flatMap { Int32($0) }
        let reason = arguments.option("reason")
        let environment = arguments.option("env")
        let operatorName = arguments.operatorName()
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        guard let original, AppleTransactionID.isValid(original)
        else { return usageError("--original-transaction-id must be Apple's original transaction id (digits)") }
        guard let days, (1...90).contains(days) else { return usageError("--days must be 1 to 90 (Apple's limit)") }
        guard let reasonCode, (0...3).contains(reasonCode) else { return usageError("--reason-code must be 0, 1, 2 or 3") }
        guard let reason, !reason.trimmingCharacters(in: .whitespaces).isEmpty else {
            return usageError("--reason is required: say why, for the audit trail")
        }
        let client: AppStoreServerAPIClient
        switch AppleAPIAccess.client(environment: environment) {
        case .success(let made): client = made
        case .failure(let exit): return exit.status
        }
        let asked = Asked(
            originalTransactionId: original, extendByDays: days, extendReasonCode: reasonCode,
            requestIdentifier: UUID().uuidString.lowercased())
        return await Subsctl.withDatabase { pool in
            var answered = Answered()
            var output: Output?
            var status = ExitStatus.success
            do throws(AppStoreAPIError) {
                let response = try await client.extendSubscriptionRenewalDate(
                    originalTransactionId: original,
                    ExtendRenewalDateRequest(
                        extendByDays: days, extendReasonCode: reasonCode, requestIdentifier: asked.requestIdentifier))
                answered = Answered(
                    success: response.success, effectiveDate: response.effectiveDate, webOrderLineItemId: response.webOrderLineItemId)
                output = Output(
                    originalTransactionId: original, success: response.success ?? false, effectiveDate: response.effectiveDate,
                    webOrderLineItemId: response.webOrderLineItemId)
                if response.success != true { status = ExitStatus.refused }
            } catch {
                answered.error = error.description
                status = AppleAPIAccess.failed(error)
            }
            if let output {
                try Subsctl.printResult(output, asJSON: asJSON) {
                    "originalTransactionId=\(original) success=\(output.success)"
                        + " effectiveDate=\(output.effectiveDate.map { RFC3339.string(from: $0) } ?? "-")"
                        + " webOrderLineItemId=\(output.webOrderLineItemId ?? "-")"
                }
            }
            try await AuditLog(pool: pool).record(
                operator: operatorName, action: "RENEWAL_DATE_EXTENDED", reason: reason, before: asked, after: answered)
            return status
        }
    }
}
