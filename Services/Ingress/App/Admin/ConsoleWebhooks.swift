import Foundation
import HTTPServer
import ServiceRuntime
import Storage

extension Console {
    /// Deliveries per page of an endpoint's page.
    static let deliveriesPerPage = 50

    /// The webhook actions: each runs the `/admin/v1/webhooks` handler, so its checks and audit
    /// row are the admin API's.
    static let webhookActions: [String: Action] = [
        "create-webhook": Action(
            title: "Register a webhook endpoint", pathFields: [], bodyFields: ["url", "eventTypes", "environments", "description"],
            back: { _ in "/admin/webhooks" }, showsSecret: true
        ) { try await $0.webhooks.create($1, operator: $2) },
        "delete-webhook": Action(
            title: "Delete the webhook endpoint", pathFields: ["id"], bodyFields: [], back: { _ in "/admin/webhooks" }
        ) { try await $0.webhooks.delete($1, operator: $2) },
        "rotate-webhook-secret": Action(
            title: "Rotate the signing secret", pathFields: ["id"], bodyFields: [],
            back: { ConsoleHTML.webhookHref($0["id"] ?? "") }, showsSecret: true
        ) { try await $0.webhooks.rotate($1, operator: $2) },
        "retry-delivery": Action(
            title: "Retry the delivery", pathFields: ["id", "eventId"], bodyFields: [], back: { ConsoleHTML.webhookHref($0["id"] ?? "") }
        ) { try await $0.webhooks.retry($1, operator: $2) },
    ]

    /// The endpoints not deleted, and the registration form.
    func webhooksPage(_ context: AdminRequestContext) async throws -> HTTPResponse {
        let csrf = context.csrf ?? ""
        let endpoints = try await routes.webhooks.store.endpoints()
        let rows = endpoints.map { endpoint -> [HTML] in
            [
                "<a href=\"\(ConsoleHTML.webhookHref(endpoint.id))\">\(endpoint.id)</a>", HTML(endpoint.url), HTML(endpoint.description ?? ""),
                HTML(Self.listed(endpoint.eventTypes, all: "every type")), HTML(Self.listed(endpoint.environments, all: "both")),
                HTML(ConsoleHTML.time(endpoint.createdAt)),
            ]
        }
        let register = ConsoleHTML.actionForm(
            "create-webhook", title: "Register an endpoint", csrf: csrf, hidden: [:], inputs: [("url", "URL (https://…)")],
            optional: [
                ("eventTypes", "Event types (comma-separated; empty: every type)"),
                ("environments", "Environments (Production, Sandbox; empty: both)"), ("description", "Description"),
            ],
            reason: false)
        let html =
            ConsoleHTML.section(
                "Endpoints",
                ConsoleHTML.table(["endpoint", "url", "description", "event types", "environments", "created"], rows, id: "webhook-endpoints"))
            + ConsoleHTML.section(
                "Register an endpoint", register + "<p>Its signing secret is shown once, on the page that confirms the registration.</p>")
        return ConsoleHTML.page(title: "Webhooks", principal: context.principal, csrf: csrf, html)
    }

    /// One endpoint: its settings, its actions, and its deliveries (newest first, by status, by page).
    func webhookPage(_ request: HTTPRequest, _ context: AdminRequestContext) async throws -> HTTPResponse {
        let csrf = context.csrf ?? ""
        let store = routes.webhooks.store
        guard let id = try? WebhookRoutes.id(request), let endpoint = try await store.endpoint(id) else {
            return ConsoleHTML.page(
                title: "Not found", principal: context.principal, csrf: csrf, status: 404,
                "<p class=\"error\">No webhook endpoint has the id <code>\(request.pathParameter("id") ?? "")</code>. <a href=\"/admin/webhooks\">All endpoints</a></p>"
            )
        }
        let text = request.query("status") ?? ""
        let status = WebhookStore.Status(rawValue: text)
        guard status != nil || text.isEmpty else {
            let names = WebhookStore.Status.allCases.map(\.rawValue).joined(separator: ", ")
            return ConsoleHTML.page(
                title: "Bad filter", principal: context.principal, csrf: csrf, status: 400,
                "<p class=\"error\">The status must be one of \(names), not <code>\(text)</code>.</p>")
        }
        let before = request.query("before").flatMap { Int64($0) }
        let rows = try await store.deliveries(endpointID: id, status: status, beforeSeq: before, limit: Self.deliveriesPerPage + 1)
        let html =
            ConsoleHTML.section("Endpoint", id: "webhook", Self.settings(endpoint))
            + (endpoint.deletedAt == nil ? Self.endpointActions(endpoint, csrf: csrf) : "")
            + ConsoleHTML.section(
                "Deliveries", id: "deliveries-section",
                Self.statusFilter(id, current: status)
                    + Self.deliveries(
                        Array(rows.prefix(Self.deliveriesPerPage)), endpointID: id, csrf: endpoint.deletedAt == nil ? csrf : nil)
                    + Self.olderLink(rows, endpointID: id, status: status))
        return ConsoleHTML.page(title: "Webhook \(id)", principal: context.principal, csrf: csrf, html)
    }

    static func listed(_ values: [String]?, all: String) -> String { values.map { $0.joined(separator: ", ") } ?? all }

    static func settings(_ endpoint: WebhookStore.Endpoint) -> HTML {
        let fields: [(String, String)] = [
            ("id", endpoint.id), ("url", endpoint.url), ("description", endpoint.description ?? "–"),
            ("event types", listed(endpoint.eventTypes, all: "every type")), ("environments", listed(endpoint.environments, all: "both")),
            ("created", ConsoleHTML.time(endpoint.createdAt)), ("previous secret signs until", ConsoleHTML.time(endpoint.previousSecretExpiresAt)),
            ("deleted", ConsoleHTML.time(endpoint.deletedAt)),
        ]
        return ConsoleHTML.table(["field", "value"], fields.map { [HTML($0.0), HTML($0.1)] }, id: "webhook-settings")
    }

    static func endpointActions(_ endpoint: WebhookStore.Endpoint, csrf: String) -> HTML {
        ConsoleHTML.section(
            "Actions",
            ConsoleHTML.actionForm("rotate-webhook-secret", title: "Rotate the signing secret", csrf: csrf, hidden: ["id": endpoint.id])
                + ConsoleHTML.actionForm("delete-webhook", title: "Delete the endpoint", csrf: csrf, hidden: ["id": endpoint.id]))
    }

    /// Links to the deliveries of each status; the current one in bold.
    static func statusFilter(_ id: String, current: WebhookStore.Status?) -> HTML {
        let choices: [(String?, String)] = [(nil, "all")] + WebhookStore.Status.allCases.map { ($0.rawValue, $0.rawValue) }
        let links = choices.map { status, label -> HTML in
            let link: HTML = "<a href=\"\(ConsoleHTML.webhookHref(id, status: status))\" id=\"filter-\(label)\">\(label)</a>"
            return status == current?.rawValue ? "<strong>\(link)</strong>" : link
        }
        return "<p id=\"status-filter\">Status: \(links.joined(separator: " · "))</p>"
    }

    /// The deliveries, each with a retry button unless `csrf` is nil (a deleted endpoint gets nothing sent).
    static func deliveries(_ rows: [WebhookStore.Delivery], endpointID: String, csrf: String?) -> HTML {
        ConsoleHTML.table(
            ["event", "type", "status", "attempts", "last answer", "next attempt", "action"],
            rows.map { delivery in
                [
                    HTML(delivery.eventId), HTML(delivery.type), "<span class=\"\(delivery.status.rawValue)\">\(delivery.status.rawValue)</span>",
                    HTML(String(delivery.attempts)), HTML(ConsoleHTML.lastAnswer(statusCode: delivery.lastStatusCode, error: delivery.lastError)),
                    HTML(ConsoleHTML.time(delivery.nextAttemptAt)),
                    csrf.map {
                        ConsoleHTML.actionForm("retry-delivery", title: "Retry", csrf: $0, hidden: ["id": endpointID, "eventId": delivery.eventId])
                    } ?? "endpoint deleted",
                ]
            }, id: "deliveries")
    }

    /// The next page's link when there is one more row than a page holds.
    static func olderLink(_ rows: [WebhookStore.Delivery], endpointID: String, status: WebhookStore.Status?) -> HTML {
        guard rows.count > deliveriesPerPage, let last = rows.prefix(deliveriesPerPage).last else { return "" }
        let href = ConsoleHTML.webhookHref(endpointID, status: status?.rawValue)
        return "<p><a href=\"\(href + (status == nil ? "?" : "&") + "before=\(last.seq)")\" id=\"older\">Older deliveries</a></p>"
    }
}

extension CasePage {
    /// The events the app's other services were sent about the user, each with its webhook
    /// deliveries and a retry button per delivery.
    var outboundEvents: HTML {
        guard c.user != nil else { return "" }
        let rows = c.outboundEvents.map { event -> [HTML] in
            [
                HTML(String(event.sequence)), HTML(event.id), HTML(event.type), HTML(ConsoleHTML.time(event.occurredAt)),
                HTML(Self.summary(event.data)), HTML(event.publishedAt == nil ? "in the outbox" : "published"), deliveries(of: event),
            ]
        }
        return ConsoleHTML.section(
            "Outbound events", id: "outbound",
            ConsoleHTML.table(["sequence", "event", "type", "occurred", "data", "broker", "webhook deliveries"], rows, id: "outbound-events"))
    }

    private func deliveries(of event: SupportCase.OutboundEvent) -> HTML {
        ConsoleHTML.table(
            ["endpoint", "status", "attempts", "last answer", "next attempt", "action"],
            event.deliveries.map { delivery in
                [
                    "<a href=\"\(ConsoleHTML.webhookHref(delivery.endpointId))\" title=\"\(delivery.url)\">\(delivery.endpointId)</a>",
                    "<span class=\"\(delivery.status)\">\(delivery.status)</span>", HTML(String(delivery.attempts)),
                    HTML(ConsoleHTML.lastAnswer(statusCode: delivery.lastStatusCode, error: delivery.lastError)),
                    HTML(ConsoleHTML.time(delivery.nextAttemptAt)),
                    delivery.endpointDeletedAt == nil
                        ? ConsoleHTML.actionForm(
                            "retry-delivery", title: "Retry", csrf: csrf, hidden: hidden(["id": delivery.endpointId, "eventId": event.id]))
                        : "endpoint deleted",
                ]
            })
    }

    /// An event's data in one line: its top-level fields as `name=value`, nested ones elided.
    static func summary(_ data: JSONValue) -> String {
        guard case .object(let fields) = data else { return scalar(data) }
        return fields.sorted { $0.key < $1.key }.map { "\($0.key)=\(scalar($0.value))" }.joined(separator: ", ")
    }

    private static func scalar(_ value: JSONValue) -> String {
        switch value {
        case .null: "null"
        case .bool(let flag): String(flag)
        case .number(let number): number.rounded() == number && abs(number) < 1e15 ? String(Int64(number)) : String(number)
        case .string(let text): text
        case .array: "[…]"
        case .object: "{…}"
        }
    }
}
