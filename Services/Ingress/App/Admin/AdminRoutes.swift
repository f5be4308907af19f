import Credits
import Domain
import Foundation
import HTTPServer
import Pipeline
import Postgres
import ServiceRuntime
import Storage

/// The admin API (`/admin/v1`): the support lookup and the event queue (reads), and the operators'
/// actions, each the same store call as its `subsctl` twin, with its audit row naming the token's
/// name as operator, answering the state it left.
struct AdminRoutes: Sendable {
    let cases: CaseStore
    /// The event queue's lists and counts, on the read pool (`DATABASE_READ_URL`).
    let queue: CaseStore
    let events: EventStore
    let chains: ChainBindingStore
    let tasks: TaskStore
    let users: UserStore
    let ledger: CreditLedger
    let cursors: PageCursorSigner
    /// Where replayed events are queued at once.
    let eventTopic: String
    /// `CREDITS_MAX_BALANCE`, `CREDITS_MAX_ADJUSTMENT`.
    let creditLimits: CreditLimits
    let clock: any WallClock
    /// Entitlements and promotional grants (their own file), which the console's actions also run.
    let entitlements: EntitlementAdminRoutes
    /// The webhook endpoints and their deliveries (their own file), which the console's pages read and its actions run.
    let webhooks: WebhookRoutes

    func registerReads(in admin: inout RouterGroup<AdminRequestContext>) {
        admin.get("lookup") { request, _ in try await lookup(request) }
        admin.get("events") { request, _ in try await listEvents(request) }
        admin.get("events/summary") { _, _ in .json(["items": try await queue.eventSummary(now: clock.now())]) }
    }

    func registerActions(in admin: inout RouterGroup<AdminRequestContext>) {
        admin.post("events/{eventId}/replay") { request, context in
            try await replayEvent(request, operator: try context.requirePrincipal())
        }
        admin.post("events/replay") { request, context in try await replayCode(request, operator: try context.requirePrincipal()) }
        admin.post("chains/{originalTransactionId}/requery") { request, context in
            try await requery(request, operator: try context.requirePrincipal())
        }
        admin.post("chains/{originalTransactionId}/attribute") { request, context in
            try await attribute(request, operator: try context.requirePrincipal())
        }
        admin.post("chains/{originalTransactionId}/unfreeze") { request, context in
            try await unfreeze(request, operator: try context.requirePrincipal())
        }
        admin.post("users/{userId}/credits/adjustments") { request, context in
            try await adjustCredits(request, operator: try context.requirePrincipal())
        }
        admin.post("users/{userId}/test-user") { request, context in
            try await setTestUser(request, operator: try context.requirePrincipal())
        }
        admin.post("users/{userId}/consent/restore") { request, context in
            try await restoreConsent(request, operator: try context.requirePrincipal())
        }
        admin.post("recoveries") { request, context in try await recover(request, operator: try context.requirePrincipal()) }
    }

    // MARK: Reads

    func lookup(_ request: HTTPRequest) async throws -> HTTPResponse {
        guard let q = request.query("q")?.trimmingCharacters(in: .whitespaces), (1...200).contains(q.count) else {
            throw APIError.invalidRequest("q must be an id of 1 to 200 characters")
        }
        guard let found = try await cases.lookup(q, now: clock.now()) else {
            throw APIError.notFound("nothing has the id \(q)")
        }
        return .json(found)
    }

    static let statuses = ["RECEIVED", "PROCESSING", "RETRY_WAIT", "SUCCEEDED", "DEAD"]

    func listEvents(_ request: HTTPRequest) async throws -> HTTPResponse {
        let status = request.query("status").flatMap { $0.isEmpty ? nil : $0 }
        let errorCode = request.query("errorCode").flatMap { $0.isEmpty ? nil : $0 }
        if let status, !Self.statuses.contains(status) {
            throw APIError.invalidRequest("status must be one of \(Self.statuses.joined(separator: ", "))")
        }
        if let errorCode, !Self.isErrorCode(errorCode) {
            throw APIError.invalidRequest("errorCode must be an error code such as UNMATCHED_PRODUCT")
        }
        // A cursor is only good for the filter it was issued under.
        let scope = "\(status ?? "")|\(errorCode ?? "")"
        let page = try PageRequest(request, list: "admin-events", userID: scope, cursors: cursors)
        let rows = try await queue.events(status: status, errorCode: errorCode, beforeID: page.after?.id, limit: page.limit + 1)
        return .json(
            Page(
                rows: rows, limit: page.limit, item: { $0 },
                cursor: { PageCursor(list: "admin-events", userID: scope, position: $0.eventId, id: $0.eventId) },
                signer: cursors))
    }

    // MARK: Actions

    /// Every action's body carries the operator's reason for the audit trail.
    static func reason(_ text: String?) throws(HTTPError) -> String {
        guard let text, !text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty, text.count <= 1000 else {
            throw APIError.invalidRequest("reason is required (1 to 1000 characters): say why, for the audit trail")
        }
        return text
    }

    static func isErrorCode(_ text: String) -> Bool {
        (1...64).contains(text.utf8.count)
            && text.utf8.allSatisfy { (0x41...0x5A).contains($0) || (0x30...0x39).contains($0) || $0 == UInt8(ascii: "_") }
    }

    static func originalTransactionID(_ request: HTTPRequest) throws(HTTPError) -> String {
        guard let id = request.pathParameter("originalTransactionId"), AppleTransactionID.isValid(id) else {
            throw APIError.invalidRequest("originalTransactionId must be Apple's original transaction id (digits only)")
        }
        return id
    }

    static func userID(_ text: String?, field: String) throws(HTTPError) -> String {
        guard let text, (1...128).contains(text.count) else {
            throw APIError.invalidRequest("\(field) must be a user id of 1 to 128 characters")
        }
        return text
    }

    static func environment(_ text: String?) throws(HTTPError) -> String? {
        guard let text else { return nil }
        guard ["Production", "Sandbox"].contains(text) else { throw APIError.invalidRequest("environment must be Production or Sandbox") }
        return text
    }

    struct ReasonBody: Decodable {
        let reason: String?
    }

    func replayEvent(_ request: HTTPRequest, operator principal: AdminPrincipal) async throws -> HTTPResponse {
        guard let text = request.pathParameter("eventId"), text.count <= 19, let id = Int64(text), id > 0 else {
            throw APIError.invalidRequest("eventId must be an event id")
        }
        let reason = try Self.reason(try request.decodeJSON(ReasonBody.self).reason)
        try await events.replayDead(
            eventID: id, topic: eventTopic, operator: principal.name, reason: reason)
        guard let event = try await cases.event(id) else { throw APIError.notFound("no event \(id)") }
        return .json(event)
    }

    struct ReplayCodeBody: Decodable {
        let errorCode: String?
        let reason: String?
    }
    struct ReplayCodeAnswer: Encodable {
        let errorCode: String
        let replayed: Int
    }

    func replayCode(_ request: HTTPRequest, operator principal: AdminPrincipal) async throws -> HTTPResponse {
        let body = try request.decodeJSON(ReplayCodeBody.self)
        guard let code = body.errorCode, Self.isErrorCode(code) else {
            throw APIError.invalidRequest("errorCode must be an error code such as UNMATCHED_PRODUCT")
        }
        let reason = try Self.reason(body.reason)
        let replayed = try await events.replayDead(errorCode: code, operator: principal.name, reason: reason)
        return .json(ReplayCodeAnswer(errorCode: code, replayed: replayed))
    }

    struct RequeryBody: Decodable {
        let environment: String?
        let reason: String?
    }
    /// A task for the workers, as stored.
    struct TaskAnswer: Encodable {
        let taskId: Int64
        let kind: String
        let status: String
        let environment: String
        let originalTransactionId: String?
        let from: Date?
        let to: Date?
    }

    func requery(_ request: HTTPRequest, operator principal: AdminPrincipal) async throws -> HTTPResponse {
        let original = try Self.originalTransactionID(request)
        let body = try request.decodeJSON(RequeryBody.self)
        let reason = try Self.reason(body.reason)
        let named = try Self.environment(body.environment)
        let environment: String
        if let named { environment = named } else { environment = try await chains.environment(ofChain: original) }
        let id = try await tasks.requestRequery(
            environment: environment, originalTransactionID: original, reason: reason, operator: principal.name)
        let task = try await tasks.outcome(of: id)
        return .json(
            TaskAnswer(
                taskId: id, kind: TaskKind.requery.rawValue, status: task?.status.rawValue ?? TaskStatus.pending.rawValue,
                environment: environment, originalTransactionId: original, from: nil, to: nil))
    }

    struct AttributeBody: Decodable {
        let userId: String?
        let environment: String?
        let reason: String?
    }

    func attribute(_ request: HTTPRequest, operator principal: AdminPrincipal) async throws -> HTTPResponse {
        let original = try Self.originalTransactionID(request)
        let body = try request.decodeJSON(AttributeBody.self)
        let user = try Self.userID(body.userId, field: "userId")
        let result = try await chains.attribute(
            environment: try Self.environment(body.environment), originalTransactionID: original, userID: user,
            operator: principal.name, reason: try Self.reason(body.reason))
        return .json(result)
    }

    struct UnfreezeBody: Decodable {
        let ownerUserId: String?
        let environment: String?
        let reason: String?
    }

    func unfreeze(_ request: HTTPRequest, operator principal: AdminPrincipal) async throws -> HTTPResponse {
        let original = try Self.originalTransactionID(request)
        let body = try request.decodeJSON(UnfreezeBody.self)
        let owner = try Self.userID(body.ownerUserId, field: "ownerUserId")
        let result = try await chains.unfreeze(
            environment: try Self.environment(body.environment), originalTransactionID: original, ownerUserID: owner,
            operator: principal.name, reason: try Self.reason(body.reason))
        return .json(result)
    }

    /// A credit amount as a JSON number (`3`, `-2.5`) or a decimal string.
    struct Amount: Decodable {
        let text: String
        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let text = try? container.decode(String.self) {
                self.text = text
            } else {
                self.text = "\(try container.decode(Decimal.self))"
            }
        }
    }
    struct AdjustmentBody: Decodable {
        let pool: String?
        let amount: Amount?
        let number: String?
        let reason: String?
    }
    struct AdjustmentAnswer: Encodable {
        let adjustmentNo: String
        let userId: String
        let pool: String
        let amount: String
        let applied: String
        let unrecoverable: String
        let balanceAfter: String
        /// False when this number was booked before: nothing new was, this is the first result.
        let booked: Bool
    }

    func adjustCredits(_ request: HTTPRequest, operator principal: AdminPrincipal) async throws -> HTTPResponse {
        let user = try Self.userID(request.pathParameter("userId"), field: "userId")
        let body = try request.decodeJSON(AdjustmentBody.self)
        guard let pool = body.pool.flatMap(CreditPool.init(rawValue:)) else {
            throw APIError.invalidRequest("pool must be SUBSCRIPTION, WELCOME or PERMANENT")
        }
        guard let amount = body.amount.flatMap({ CreditAmount.micro($0.text) }), amount != 0, amount != .min else {
            throw APIError.invalidRequest("amount must be a non-zero number of credits with at most 6 decimals (e.g. 3 or -2.5)")
        }
        guard let number = body.number, (1...128).contains(number.count) else {
            throw APIError.invalidRequest("number (the adjustment number, 1 to 128 characters) is required")
        }
        let reason = try Self.reason(body.reason)
        let result = try await ledger.adjust(
            userID: user, pool: pool, amount: amount, adjustmentNo: number, operator: principal.name, reason: reason,
            limits: creditLimits)
        return .json(
            AdjustmentAnswer(
                adjustmentNo: result.adjustmentNo, userId: result.userID, pool: result.pool.rawValue,
                amount: CreditAmount.decimal(result.amount), applied: CreditAmount.decimal(result.applied),
                unrecoverable: CreditAmount.decimal(result.unrecoverable), balanceAfter: CreditAmount.decimal(result.balanceAfter),
                booked: result.booked))
    }

    struct TestUserBody: Decodable {
        let enabled: Bool?
        let reason: String?
    }
    struct TestUserAnswer: Encodable {
        let userId: String
        let isTestUser: Bool
        let wasTestUser: Bool
    }

    func setTestUser(_ request: HTTPRequest, operator principal: AdminPrincipal) async throws -> HTTPResponse {
        let user = try Self.userID(request.pathParameter("userId"), field: "userId")
        let body = try request.decodeJSON(TestUserBody.self)
        guard let enabled = body.enabled else { throw APIError.invalidRequest("enabled (true or false) is required") }
        let before = try await users.setTestUser(
            user, enabled: enabled, operator: principal.name, reason: try Self.reason(body.reason))
        return .json(TestUserAnswer(userId: user, isTestUser: enabled, wasTestUser: before))
    }

    func restoreConsent(_ request: HTTPRequest, operator principal: AdminPrincipal) async throws -> HTTPResponse {
        let user = try Self.userID(request.pathParameter("userId"), field: "userId")
        let reason = try Self.reason(try request.decodeJSON(ReasonBody.self).reason)
        let restored = try await users.restoreConsent(
            userID: user, environment: entitlements.environment, operator: principal.name, reason: reason, now: clock.now())
        return .json(restored)
    }

    struct RecoveryBody: Decodable {
        let from: Date?
        let to: Date?
        let environment: String?
        let reason: String?
    }

    func recover(_ request: HTTPRequest, operator principal: AdminPrincipal) async throws -> HTTPResponse {
        let body = try request.decodeJSON(RecoveryBody.self)
        guard let from = body.from, let to = body.to else {
            throw APIError.invalidRequest("from and to must be RFC 3339 times, e.g. 2026-11-29T10:00:00Z")
        }
        guard let environment = try Self.environment(body.environment) else {
            throw APIError.invalidRequest("environment must be Production or Sandbox")
        }
        let reason = try Self.reason(body.reason)
        let now = clock.now()
        if let problem = TaskStore.recoveryRangeProblem(from: from, to: to, environment: environment, now: now) {
            throw APIError.invalidRequest(problem)
        }
        let end = min(to, now)
        let id = try await tasks.requestRecovery(
            environment: environment, start: from, end: end, reason: reason, operator: principal.name)
        let task = try await tasks.outcome(of: id)
        return .json(
            TaskAnswer(
                taskId: id, kind: TaskKind.recovery.rawValue, status: task?.status.rawValue ?? TaskStatus.pending.rawValue,
                environment: environment, originalTransactionId: nil, from: from, to: end))
    }
}
