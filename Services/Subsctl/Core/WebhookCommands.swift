import Crypto
import Foundation
import Postgres
import ServiceRuntime
import Storage
import Webhooks

/// `subsctl webhooks …`: the admin API's webhook endpoints from a shell, on the database directly
/// (create and rotate-secret also need `PAYLOAD_ENCRYPTION_KEYS` to seal the new secret, and the
/// `WEBHOOK_*` settings of the ingress for the URL check and the overlap).
enum WebhookCommands {
    /// The settings create and rotate-secret need, or the configuration's problems printed.
    static func registration(_ pool: PostgresPool) throws -> WebhookRegistration? {
        let reader = ConfigurationReader(environment: Subsctl.environment)
        let cipher = PayloadCipher(reader: reader)
        let configuration = WebhookConfiguration(reader: reader)
        do {
            try reader.validate()
        } catch {
            Subsctl.printError("\(error)")
            return nil
        }
        guard let cipher else { return nil }
        return WebhookRegistration(store: WebhookStore(pool: pool), cipher: cipher, configuration: configuration)
    }

    static func line(_ endpoint: WebhookEndpointSummary) -> String {
        var parts = ["\(endpoint.id) \(endpoint.url)"]
        parts.append("types=\(endpoint.eventTypes?.joined(separator: ",") ?? "all")")
        parts.append("environments=\(endpoint.environments?.joined(separator: ",") ?? "all")")
        if let deleted = endpoint.deletedAt { parts.append("deleted=\(RFC3339.string(from: deleted))") }
        if let until = endpoint.previousSecretExpiresAt { parts.append("previousSecretUntil=\(RFC3339.string(from: until))") }
        if let description = endpoint.description { parts.append("(\(description))") }
        return parts.joined(separator: " ")
    }

    static func line(_ delivery: WebhookStore.Delivery) -> String {
        var parts = ["\(delivery.seq) \(delivery.eventId) \(delivery.type) \(delivery.status.rawValue) attempts=\(delivery.attempts)"]
        if let code = delivery.lastStatusCode { parts.append("lastStatus=\(code)") }
        if let error = delivery.lastError { parts.append("lastError=\"\(error)\"") }
        if let next = delivery.nextAttemptAt { parts.append("next=\(RFC3339.string(from: next))") }
        return parts.joined(separator: " ")
    }

    /// An endpoint as the admin API shows it (never its secret); the command's success.
    static func printEndpoint(_ endpoint: WebhookStore.Endpoint, asJSON: Bool) throws -> Int32 {
        let output = WebhookEndpointSummary(endpoint)
        try Subsctl.printResult(output, asJSON: asJSON) { line(output) }
        return ExitStatus.success
    }

    /// The one positional an endpoint command takes: the endpoint's id.
    static func endpointID(_ arguments: ParsedArguments, count: Int = 1) -> String? {
        guard arguments.positionals.count == count, arguments.positionals[0].hasPrefix("wh_") else { return nil }
        return arguments.positionals[0]
    }
}

enum WebhooksCreateCommand: SubsctlCommand {
    static let path = ["webhooks", "create"]
    static let usage =
        "webhooks create --url URL [--event-types T1,T2] [--environments Production,Sandbox] [--description TEXT] [--operator NAME] [--json]"
    static let summary = "Register a webhook endpoint; prints its id and its secret (shown this once)."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let url = arguments.option("url")
        let types = arguments.option("event-types").map { $0.split(separator: ",").map(String.init) }
        let environments = arguments.option("environments").map { $0.split(separator: ",").map(String.init) }
        let description = arguments.option("description")
        let operatorName = arguments.operatorName()
        let asJSON = arguments.flag("json")
        if let status = unusedArgumentsError(arguments) { return status }
        guard url != nil else { return usageError("--url is required") }
        return await Subsctl.withDatabase { pool in
            guard let registration = try WebhookCommands.registration(pool) else { return ExitStatus.configuration }
            do {
                let (endpoint, secret) = try await registration.register(
                    url: url, eventTypes: types, environments: environments, description: description, operator: operatorName)
                let output = WebhookEndpointSummary(endpoint, secret: secret)
                try Subsctl.printResult(output, asJSON: asJSON) { WebhookCommands.line(output) + "\nsecret=\(secret)" }
                return ExitStatus.success
            } catch let refusal as WebhookRegistration.Refusal {
                switch refusal {
                case .invalid(let message), .urlRefused(let message): Subsctl.printError(message)
                }
                return ExitStatus.refused
            }
        }
    }
}

enum WebhooksListCommand: SubsctlCommand {
    static let path = ["webhooks", "list"]
    static let usage = "webhooks list [--json]"
    static let summary = "List the webhook endpoints not deleted."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let asJSON = arguments.flag("json")
        if let status = unusedArgumentsError(arguments) { return status }
        return await Subsctl.withDatabase { pool in
            let items = try await WebhookStore(pool: pool).endpoints().map { WebhookEndpointSummary($0) }
            try Subsctl.printItems(items, asJSON: asJSON, line: WebhookCommands.line)
            return ExitStatus.success
        }
    }
}

enum WebhooksShowCommand: SubsctlCommand {
    static let path = ["webhooks", "show"]
    static let usage = "webhooks show WEBHOOK_ID [--json]"
    static let summary = "Show one webhook endpoint (deleted ones too)."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let asJSON = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard let id = WebhookCommands.endpointID(arguments) else { return usageError("give one webhook id (wh_…)") }
        return await Subsctl.withDatabase { pool in
            guard let endpoint = try await WebhookStore(pool: pool).endpoint(id) else {
                Subsctl.printError("no webhook endpoint \(id)")
                return ExitStatus.refused
            }
            return try WebhookCommands.printEndpoint(endpoint, asJSON: asJSON)
        }
    }
}

enum WebhooksDeleteCommand: SubsctlCommand {
    static let path = ["webhooks", "delete"]
    static let usage = "webhooks delete WEBHOOK_ID --reason TEXT [--operator NAME] [--json]"
    static let summary = "Delete a webhook endpoint: it gets nothing new; its deliveries stay readable."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let reason = arguments.option("reason")
        let operatorName = arguments.operatorName()
        let asJSON = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard let id = WebhookCommands.endpointID(arguments) else { return usageError("give one webhook id (wh_…)") }
        guard let reason, !reason.isEmpty else { return usageError("--reason is required") }
        return await Subsctl.withDatabase { pool in
            let store = WebhookStore(pool: pool)
            guard try await store.delete(id, operator: operatorName, reason: reason), let endpoint = try await store.endpoint(id) else {
                Subsctl.printError("no live webhook endpoint \(id)")
                return ExitStatus.refused
            }
            return try WebhookCommands.printEndpoint(endpoint, asJSON: asJSON)
        }
    }
}

enum WebhooksRotateSecretCommand: SubsctlCommand {
    static let path = ["webhooks", "rotate-secret"]
    static let usage = "webhooks rotate-secret WEBHOOK_ID --reason TEXT [--operator NAME] [--json]"
    static let summary =
        "Give a webhook endpoint a new secret (printed once); the old one signs beside it for WEBHOOK_SECRET_OVERLAP_HOURS."

    /// The `--json` answer, as the admin API's.
    struct Output: Encodable {
        let id: String
        let secret: String
        let previousSecretExpiresAt: Date?
    }

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let reason = arguments.option("reason")
        let operatorName = arguments.operatorName()
        let asJSON = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard let id = WebhookCommands.endpointID(arguments) else { return usageError("give one webhook id (wh_…)") }
        guard let reason, !reason.isEmpty else { return usageError("--reason is required") }
        return await Subsctl.withDatabase { pool in
            guard let registration = try WebhookCommands.registration(pool) else { return ExitStatus.configuration }
            guard let (secret, endpoint) = try await registration.rotate(id, operator: operatorName, reason: reason) else {
                Subsctl.printError("no live webhook endpoint \(id)")
                return ExitStatus.refused
            }
            let output = Output(id: id, secret: secret, previousSecretExpiresAt: endpoint.previousSecretExpiresAt)
            try Subsctl.printResult(output, asJSON: asJSON) {
                "secret=\(secret) previousSecretUntil=\(endpoint.previousSecretExpiresAt.map { RFC3339.string(from: $0) } ?? "-")"
            }
            return ExitStatus.success
        }
    }
}

enum WebhooksDeliveriesCommand: SubsctlCommand {
    static let path = ["webhooks", "deliveries"]
    static let usage = "webhooks deliveries WEBHOOK_ID [--status PENDING|RETRYING|DELIVERED|DEAD] [--limit N] [--before SEQ] [--json]"
    static let summary = "List a webhook endpoint's deliveries, newest first; --before pages on (the first column)."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let statusText = arguments.option("status")
        let limitText = arguments.option("limit")
        let beforeText = arguments.option("before")
        let asJSON = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard let id = WebhookCommands.endpointID(arguments) else { return usageError("give one webhook id (wh_…)") }
        let status = statusText.flatMap(WebhookStore.Status.init(rawValue:))
        if statusText != nil && status == nil { return usageError("--status must be PENDING, RETRYING, DELIVERED or DEAD") }
        guard let limit = Int(limitText ?? "50"), (1...1000).contains(limit) else {
            return usageError("--limit must be a whole number from 1 to 1000")
        }
        let before = beforeText.flatMap { Int64($0) }
        if beforeText != nil && before == nil { return usageError("--before must be a delivery number") }
        return await Subsctl.withDatabase { pool in
            let items = try await WebhookStore(pool: pool).deliveries(endpointID: id, status: status, beforeSeq: before, limit: limit)
            try Subsctl.printItems(items, asJSON: asJSON, line: WebhookCommands.line)
            return ExitStatus.success
        }
    }
}

enum WebhooksRetryCommand: SubsctlCommand {
    static let path = ["webhooks", "retry"]
    static let usage = "webhooks retry WEBHOOK_ID EVENT_ID [--reason TEXT] [--operator NAME] [--json]"
    static let summary = "Send a delivery again now (one more attempt after DEAD), with the same webhook-id."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let reason = arguments.option("reason") ?? "manual retry"
        let operatorName = arguments.operatorName()
        let asJSON = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard let id = WebhookCommands.endpointID(arguments, count: 2) else { return usageError("give a webhook id (wh_…) and an event id") }
        let event = arguments.positionals[1]
        return await Subsctl.withDatabase { pool in
            guard
                let delivery = try await WebhookStore(pool: pool).retry(
                    endpointID: id, eventID: event, operator: operatorName, reason: reason)
            else {
                Subsctl.printError("no delivery of \(event) to \(id)")
                return ExitStatus.refused
            }
            try Subsctl.printResult(delivery, asJSON: asJSON) { WebhookCommands.line(delivery) }
            return ExitStatus.success
        }
    }
}
