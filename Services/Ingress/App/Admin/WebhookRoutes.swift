import Domain
import Foundation
import HTTPServer
import Pipeline
import ServiceRuntime
import Storage
import Webhooks

/// The webhook endpoints of `/admin/v1/webhooks`: registration (the secret shown once), reading,
/// deletion, secret rotation with an overlap, the deliveries with their state, and a manual retry.
/// Reads for any admin token, changes for operators; every change has its audit row.
struct WebhookRoutes: Sendable {
    let registration: WebhookRegistration
    let cursors: PageCursorSigner
    var store: WebhookStore { registration.store }

    /// Adds the routes under `/admin/v1` with the admin authentication: reads for viewers, changes for operators.
    func register(in router: inout Router<AdminRequestContext>, authenticator: AdminAuthenticator) {
        router.group("/admin/v1", middleware: [AdminAuthentication(authenticator: authenticator, requiredRole: .viewer)]) {
            $0.get("webhooks") { _, _ in .json(["items": try await store.endpoints().map { WebhookEndpointSummary($0) }]) }
            $0.get("webhooks/{id}") { request, _ in .json(WebhookEndpointSummary(try await endpoint(request))) }
            $0.get("webhooks/{id}/deliveries") { request, _ in try await deliveries(request) }
        }
        router.group("/admin/v1", middleware: [AdminAuthentication(authenticator: authenticator, requiredRole: .operator)]) {
            $0.post("webhooks") { request, context in try await create(request, operator: try context.requirePrincipal()) }
            $0.delete("webhooks/{id}") { request, context in try await delete(request, operator: try context.requirePrincipal()) }
            $0.post("webhooks/{id}/rotate-secret") { request, context in
                try await rotate(request, operator: try context.requirePrincipal())
            }
            $0.post("webhooks/{id}/deliveries/{eventId}/retry") { request, context in
                try await retry(request, operator: try context.requirePrincipal())
            }
        }
    }

    static func refused(_ message: String) -> HTTPError { HTTPError(status: 422, code: "WEBHOOK_URL_REFUSED", message: message) }
    static func notFound(_ id: String) -> HTTPError {
        HTTPError(status: 404, code: "WEBHOOK_NOT_FOUND", message: "no webhook endpoint \(id)")
    }

    static func id(_ request: HTTPRequest) throws(HTTPError) -> String {
        guard let id = request.pathParameter("id"), id.hasPrefix("wh_"), (4...64).contains(id.utf8.count) else {
            throw APIError.invalidRequest("id must be a webhook endpoint id (wh_…)")
        }
        return id
    }

    func endpoint(_ request: HTTPRequest) async throws -> WebhookStore.Endpoint {
        let id = try Self.id(request)
        guard let endpoint = try await store.endpoint(id) else { throw Self.notFound(id) }
        return endpoint
    }

    struct CreateBody: Decodable {
        let url: String?
        let eventTypes: [String]?
        let environments: [String]?
        let description: String?
    }

    func create(_ request: HTTPRequest, operator principal: AdminPrincipal) async throws -> HTTPResponse {
        let body = try request.decodeJSON(CreateBody.self)
        do {
            let (endpoint, secret) = try await registration.register(
                url: body.url, eventTypes: body.eventTypes, environments: body.environments, description: body.description,
                operator: principal.name)
            return .json(WebhookEndpointSummary(endpoint, secret: secret), status: 201)
        } catch WebhookRegistration.Refusal.invalid(let message) {
            throw APIError.invalidRequest(message)
        } catch WebhookRegistration.Refusal.urlRefused(let message) {
            throw Self.refused(message)
        }
    }

    /// The operator's reason: from the body when there is one, else the query's `reason`, else `fallback`.
    static func reason(_ request: HTTPRequest, fallback: String?) throws -> String {
        var text = request.query("reason")
        if !request.body.isEmpty { text = try request.decodeJSON(AdminRoutes.ReasonBody.self).reason ?? text }
        return try AdminRoutes.reason(text ?? fallback)
    }

    func delete(_ request: HTTPRequest, operator principal: AdminPrincipal) async throws -> HTTPResponse {
        let id = try Self.id(request)
        let reason = try Self.reason(request, fallback: "webhook endpoint deleted")
        guard try await store.delete(id, operator: principal.name, reason: reason), let endpoint = try await store.endpoint(id) else {
            throw Self.notFound(id)
        }
        return .json(WebhookEndpointSummary(endpoint))
    }

    struct RotateAnswer: Encodable {
        let id: String
        let secret: String
        let previousSecretExpiresAt: Date?
    }

    func rotate(_ request: HTTPRequest, operator principal: AdminPrincipal) async throws -> HTTPResponse {
        let id = try Self.id(request)
        let reason = try Self.reason(request, fallback: nil)
        guard let (secret, endpoint) = try await registration.rotate(id, operator: principal.name, reason: reason) else {
            throw Self.notFound(id)
        }
        return .json(RotateAnswer(id: id, secret: secret, previousSecretExpiresAt: endpoint.previousSecretExpiresAt))
    }

    struct DeliveryAnswer: Encodable {
        let eventId: String
        let type: String
        let status: String
        let attempts: Int
        let lastStatusCode: Int?
        let lastError: String?
        let nextAttemptAt: Date?

        init(_ delivery: WebhookStore.Delivery) {
            eventId = delivery.eventId
            type = delivery.type
            status = delivery.status.rawValue
            attempts = delivery.attempts
            lastStatusCode = delivery.lastStatusCode
            lastError = delivery.lastError
            nextAttemptAt = delivery.nextAttemptAt
        }

        enum CodingKeys: String, CodingKey { case eventId, type, status, attempts, lastStatusCode, lastError, nextAttemptAt }

        /// Nulls written out: clients see every key either way.
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(eventId, forKey: .eventId)
            try container.encode(type, forKey: .type)
            try container.encode(status, forKey: .status)
            try container.encode(attempts, forKey: .attempts)
            try container.encode(lastStatusCode, forKey: .lastStatusCode)
            try container.encode(lastError, forKey: .lastError)
            try container.encode(nextAttemptAt, forKey: .nextAttemptAt)
        }
    }

    func deliveries(_ request: HTTPRequest) async throws -> HTTPResponse {
        let id = try Self.id(request)
        var status: WebhookStore.Status?
        if let text = request.query("status"), !text.isEmpty {
            guard let known = WebhookStore.Status(rawValue: text) else {
                let names = WebhookStore.Status.allCases.map(\.rawValue).joined(separator: ", ")
                throw APIError.invalidRequest("status must be one of \(names)")
            }
            status = known
        }
        guard try await store.endpoint(id) != nil else { throw Self.notFound(id) }
        // A cursor is only good for the endpoint and filter it was issued under.
        let scope = "\(id)|\(status?.rawValue ?? "")"
        let page = try PageRequest(request, list: "webhook-deliveries", userID: scope, cursors: cursors)
        let rows = try await store.deliveries(endpointID: id, status: status, beforeSeq: page.after?.id, limit: page.limit + 1)
        return .json(
            Page(
                rows: rows, limit: page.limit, item: DeliveryAnswer.init,
                cursor: { PageCursor(list: "webhook-deliveries", userID: scope, position: $0.seq, id: $0.seq) }, signer: cursors))
    }

    func retry(_ request: HTTPRequest, operator principal: AdminPrincipal) async throws -> HTTPResponse {
        let id = try Self.id(request)
        guard let event = request.pathParameter("eventId"), (1...128).contains(event.utf8.count) else {
            throw APIError.invalidRequest("eventId must be an outbound event id (evt_…)")
        }
        let reason = try Self.reason(request, fallback: "manual retry")
        guard let delivery = try await store.retry(endpointID: id, eventID: event, operator: principal.name, reason: reason) else {
            throw HTTPError(status: 404, code: "DELIVERY_NOT_FOUND", message: "no delivery of \(event) to \(id)")
        }
        return .json(DeliveryAnswer(delivery))
    }
}
