import Credits
import Crypto
import Foundation
import HTTPServer
import ServiceRuntime
import Storage

/// The console's sessions. Signing in with an admin token opens one: a random id in an HttpOnly,
/// SameSite=Strict, Secure cookie (the token itself is kept nowhere), a row in `console_session`
/// under the id's SHA-256 digest, and a random CSRF token its forms carry. A session closes at
/// sign-out, `ADMIN_SESSION_HOURS` after its sign-in, after `ADMIN_SESSION_IDLE_MINUTES` without a
/// request, and as soon as its credential has left `ADMIN_TOKENS`; its operator name and role
/// always come from the current configuration.
struct ConsoleSessions: Sendable {
    static let cookie = "admin_session"
    let store: ConsoleSessionStore
    let authenticator: AdminAuthenticator
    let clock: any WallClock
    let lifetime: ConsoleSessionStore.Lifetime
    let secureCookies: Bool

    init(store: ConsoleSessionStore, settings: AdminSettings, authenticator: AdminAuthenticator, clock: any WallClock) {
        self.store = store
        self.authenticator = authenticator
        self.clock = clock
        lifetime = ConsoleSessionStore.Lifetime(absolute: settings.sessionLifetime, idle: settings.sessionIdleTimeout)
        secureCookies = !settings.cookieInsecure
    }

    /// A new session for the credential of `token`: its id (the cookie's value) and principal;
    /// nil when `token` is not an admin token.
    func signIn(token: String) async throws -> (id: String, principal: AdminPrincipal)? {
        guard let credential = authenticator.credential(token: token) else { return nil }
        let id = Base64URL.encode(SecureRandom.bytes(32))
        try await store.create(
            idDigest: SHA256.hash(Array(id.utf8)), credentialDigest: credential.sessionDigest,
            csrf: Base64URL.encode(SecureRandom.bytes(32)), now: clock.now(), lifetime: lifetime)
        return (id, credential.principal)
    }

    /// The principal and CSRF token of the request's session, or nil when it has none still open.
    func resume(_ request: HTTPRequest) async throws -> (principal: AdminPrincipal, csrf: String)? {
        guard let id = Self.id(request),
            let session = try await store.open(idDigest: SHA256.hash(Array(id.utf8)), now: clock.now(), lifetime: lifetime),
            let principal = authenticator.principal(sessionDigest: session.credentialDigest)
        else { return nil }
        return (principal, session.csrf)
    }

    /// Closes the request's session server-side: a copy of its cookie opens nothing afterwards.
    func signOut(_ request: HTTPRequest) async throws {
        guard let id = Self.id(request) else { return }
        try await store.delete(idDigest: SHA256.hash(Array(id.utf8)))
    }

    /// The session id the request's cookie carries.
    static func id(_ request: HTTPRequest) -> String? {
        FormData.cookies(request)[cookie].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// A `Set-Cookie` value for the console's paths; `value` nil deletes the cookie.
    func setCookie(_ name: String, _ value: String?) -> (String, String) {
        let attributes = "; Path=/admin; HttpOnly; SameSite=Strict" + (secureCookies ? "; Secure" : "")
        return ("Set-Cookie", "\(name)=\(value ?? "")" + (value == nil ? "; Max-Age=0" : "") + attributes)
    }
}

/// The console's pages need an open session: without one a GET goes to the sign-in page and
/// anything else is refused; every POST must carry the session's CSRF token.
struct ConsoleSession: RouterMiddleware {
    let sessions: ConsoleSessions

    func handle(
        _ request: HTTPRequest, context: AdminRequestContext,
        next: (HTTPRequest, AdminRequestContext) async throws -> HTTPResponse
    ) async throws -> HTTPResponse {
        guard let session = try await sessions.resume(request) else {
            if request.method == "GET" { return ConsoleHTML.redirect("/admin/login") }
            return ConsoleHTML.page(
                title: "Signed out", principal: nil, csrf: nil, status: 401,
                "<p>You are not signed in. <a href=\"/admin/login\">Sign in</a>.</p>")
        }
        if request.method == "POST" {
            let sent = FormData.parse(String(decoding: request.body, as: UTF8.self))["csrf"] ?? ""
            guard constantTimeEquals(Array(sent.utf8), Array(session.csrf.utf8)) else {
                return ConsoleHTML.page(
                    title: "Refused", principal: session.principal, csrf: session.csrf, status: 403,
                    "<p class=\"error\">This form is stale or came from elsewhere (CSRF token). Go back, reload and try again.</p>")
            }
        }
        var context = context
        context.principal = session.principal
        context.csrf = session.csrf
        return try await next(request, context)
    }
}

/// The support console at `/admin/`: sign-in, search, the case page, the queue, and the action
/// forms (reason required, a confirmation page, then the same handler as the admin API's action).
struct Console: Sendable {
    static let loginCookie = "admin_login"
    let routes: AdminRoutes
    let sessions: ConsoleSessions

    func registerSignIn(in router: inout Router<AdminRequestContext>) {
        router.get("/admin/login") { _, _ in loginPage(failed: false) }
        router.post("/admin/login") { request, context in try await login(request, context) }
    }

    func registerPages(in console: inout RouterGroup<AdminRequestContext>) {
        console.get("") { _, context in home(context) }
        console.get("case") { request, context in try await casePage(request, context) }
        console.get("queue") { _, context in try await queuePage(context) }
        console.post("logout") { request, context in try await logout(request, context) }
        console.post("actions/{action}") { request, context in try await act(request, context) }
    }

    // MARK: Sign-in

    /// The form, with a fresh double-submit token (cookie and hidden field must match).
    func loginPage(failed: Bool) -> HTTPResponse {
        let nonce = Base64URL.encode(SecureRandom.bytes(24))
        let hours = Int(sessions.lifetime.absolute / 3600)
        let minutes = Int(sessions.lifetime.idle / 60)
        let body = """
            \(failed ? "<p class=\"error\" id=\"login-error\">That is not an admin token.</p>" : "")
            <form method="post" action="/admin/login">\(ConsoleHTML.csrfField(nonce))
            <label>Admin token <input type="password" name="token" id="token" required autocomplete="off"></label>
            <button type="submit" id="sign-in">Sign in</button></form>
            <p>Paste a token of <code>ADMIN_TOKENS</code>. It is not kept: signing in opens a session that ends when you sign
            out, after \(minutes) min without a click, and \(hours) h after signing in at the latest.</p>
            """
        return ConsoleHTML.page(
            title: "Sign in", principal: nil, csrf: nil, status: failed ? 401 : 200,
            extraHeaders: [sessions.setCookie(Self.loginCookie, nonce)], body)
    }

    func login(_ request: HTTPRequest, _ context: AdminRequestContext) async throws -> HTTPResponse {
        let fields = FormData.parse(String(decoding: request.body, as: UTF8.self))
        let nonce = FormData.cookies(request)[Self.loginCookie] ?? ""
        guard !nonce.isEmpty, constantTimeEquals(Array((fields["csrf"] ?? "").utf8), Array(nonce.utf8)),
            let token = fields["token"]?.trimmingCharacters(in: .whitespacesAndNewlines),
            let session = try await sessions.signIn(token: token)
        else {
            context.logger.notice("console sign-in refused")
            return loginPage(failed: true)
        }
        context.logger.info("console sign-in", ["admin.operator": .string(session.principal.name)])
        return ConsoleHTML.redirect(
            "/admin/",
            extraHeaders: [sessions.setCookie(ConsoleSessions.cookie, session.id), sessions.setCookie(Self.loginCookie, nil)])
    }

    func logout(_ request: HTTPRequest, _ context: AdminRequestContext) async throws -> HTTPResponse {
        let principal = try context.requirePrincipal()
        try await sessions.signOut(request)
        context.logger.info("console sign-out", ["admin.operator": .string(principal.name)])
        return ConsoleHTML.redirect("/admin/login", extraHeaders: [sessions.setCookie(ConsoleSessions.cookie, nil)])
    }

    // MARK: Pages

    static func searchForm(_ q: String = "") -> String {
        """
        <form method="get" action="/admin/case"><label>Any id (user, order, transaction, original transaction, notification UUID, account token)
        <input type="text" name="q" id="q" value="\(ConsoleHTML.escape(q))" required maxlength="200"></label>
        <button type="submit" id="search">Search</button></form>
        """
    }

    func home(_ context: AdminRequestContext) -> HTTPResponse {
        ConsoleHTML.page(title: "Search", principal: context.principal, csrf: context.csrf, Self.searchForm())
    }

    func casePage(_ request: HTTPRequest, _ context: AdminRequestContext) async throws -> HTTPResponse {
        let e = ConsoleHTML.escape
        let csrf = context.csrf ?? ""
        let q = request.query("q")?.trimmingCharacters(in: .whitespaces) ?? ""
        guard (1...200).contains(q.count) else { return home(context) }
        guard let found = try await routes.cases.lookup(q, now: routes.clock.now()) else {
            return ConsoleHTML.page(
                title: "Not found", principal: context.principal, csrf: csrf, status: 404,
                Self.searchForm(q) + "<p class=\"error\">Nothing has the id <code>\(e(q))</code>.</p>")
        }
        let c = found.supportCase
        let back = ["back": q]
        var html = Self.searchForm(q)
        html += "<p id=\"matches\">Matches: " + found.matches.map { "\(e($0.kind)) <code>\(e($0.id))</code>" }.joined(separator: ", ") + "</p>"
        // Who, current status, credits.
        html += "<div class=\"top\"><section id=\"who\"><h2>Who</h2>"
        if let user = c.user {
            html += "<p>User <strong id=\"user-id\">\(e(user.userId))</strong>\(user.isTestUser ? " (test user)" : "")<br>"
            html += "Account tokens: \(user.appAccountTokens.map { "<code>\(e($0))</code>" }.joined(separator: ", "))</p>"
        } else {
            html += "<p>No user owns this yet.</p>"
        }
        html += "</section><section id=\"status\"><h2>Status</h2>"
        html += ConsoleHTML.table(
            ["chain", "status", "product", "expires", "owner"],
            c.chains.map { chain in
                [
                    "\(e(chain.environment)):\(e(chain.originalTransactionId))",
                    "<span class=\"\(e(chain.status ?? ""))\">\(e(chain.status ?? "no subscription"))</span>"
                        + (chain.frozenReason.map { " <span class=\"error\">frozen: \(e($0))</span>" } ?? ""),
                    e(chain.activeProductId ?? "–"), e(ConsoleHTML.time(chain.expiresAt)), e(chain.userId ?? chain.binding?.userId ?? "–"),
                ]
            })
        html += "</section><section id=\"credits\"><h2>Credits</h2>"
        html += ConsoleHTML.table(["pool", "balance"], c.balances.map { [e($0.pool), e(CreditAmount.decimal($0.balance))] })
        html += "</section></div>"
        html += "<h2>Timeline</h2>"
        html += ConsoleHTML.table(
            ["at", "kind", "id", "what"], c.timeline.map { [e(ConsoleHTML.time($0.at)), e($0.kind), e($0.id), e($0.summary)] },
            id: "timeline")
        html += "<h2>Events</h2>"
        html += ConsoleHTML.table(
            ["event", "what", "status", "attempts", "received", "payload", "action"],
            try c.events.map { event in
                [
                    e(String(event.eventId)),
                    e(event.notificationType.map { $0 + (event.subtype.map { "/" + $0 } ?? "") } ?? "\(event.submissionKind ?? "") submission"),
                    "<span class=\"\(e(event.status))\">\(e(event.status))</span> \(e(event.errorCode ?? ""))",
                    e(String(event.attempts)), e(ConsoleHTML.time(event.receivedAt)),
                    ConsoleHTML.details("event \(event.eventId)", json: try SupportJSON.pretty(event)),
                    event.status == "DEAD"
                        ? ConsoleHTML.actionForm(
                            "replay-event", title: "Replay", csrf: csrf, hidden: back.merging(["eventId": String(event.eventId)]) { a, _ in a })
                        : "",
                ]
            }, id: "events")
        html += "<h2>Chains</h2>"
        for chain in c.chains {
            let hidden = back.merging(["originalTransactionId": chain.originalTransactionId, "environment": chain.environment]) { a, _ in a }
            html += "<h3>\(e(chain.environment)):\(e(chain.originalTransactionId))</h3>"
            html += ConsoleHTML.details("chain", json: try SupportJSON.pretty(chain))
            html += ConsoleHTML.actionForm("requery", title: "Re-query from Apple", csrf: csrf, hidden: hidden)
            html += ConsoleHTML.actionForm(
                "attribute", title: "Attribute to a user", csrf: csrf, hidden: hidden, inputs: [("userId", "User id")])
            if chain.frozenReason != nil {
                html += ConsoleHTML.actionForm(
                    "unfreeze", title: "Unfreeze in favour of", csrf: csrf, hidden: hidden, inputs: [("ownerUserId", "Owner user id")])
            }
        }
        html += "<h2>Orders</h2>"
        html += ConsoleHTML.table(
            ["order", "product", "type", "status", "created", "history"],
            try c.orders.map { order in
                [
                    e(order.orderNo), e(order.productId), e(order.orderType), e(order.status), e(ConsoleHTML.time(order.createdAt)),
                    ConsoleHTML.details("\(order.history.count) changes", json: try SupportJSON.pretty(order.history)),
                ]
            })
        html += "<h2>Transactions</h2>"
        html += ConsoleHTML.table(
            ["transaction", "product", "purchased", "expires", "revoked", "signed fact"],
            try c.transactions.map { t in
                [
                    e(t.transactionId), e(t.productId), e(ConsoleHTML.time(t.purchaseDate)), e(ConsoleHTML.time(t.expiresDate)),
                    e(ConsoleHTML.time(t.revocationDate)), ConsoleHTML.details("decoded payload", json: try SupportJSON.pretty(t)),
                ]
            }, id: "transactions")
        html += "<h2>Grants</h2>"
        html += ConsoleHTML.table(
            ["key", "pool", "credits", "revoked", "reason", "at"],
            c.grants.map {
                [
                    e($0.grantKey), e($0.pool), e(CreditAmount.decimal($0.amount)), e(CreditAmount.decimal($0.revokedAmount)), e($0.reason),
                    e(ConsoleHTML.time($0.createdAt)),
                ]
            })
        html += "<h2>Ledger</h2>"
        html += ConsoleHTML.table(
            ["id", "pool", "delta", "balance after", "type", "reference", "at"],
            c.ledger.map {
                [
                    e(String($0.id)), e($0.pool), e(CreditAmount.decimal($0.delta)), e(CreditAmount.decimal($0.balanceAfter)),
                    e($0.entryType), e($0.reference), e(ConsoleHTML.time($0.at)),
                ]
            })
        html += "<h2>Consumption answers</h2>"
        html += ConsoleHTML.table(
            ["notification", "outcome", "at"],
            c.consumptionAnswers.map { [e($0.notificationUUID), e($0.outcome), e(ConsoleHTML.time($0.createdAt))] })
        html += "<h2>Audit</h2>"
        html += ConsoleHTML.table(
            ["at", "operator", "action", "reason", "states"],
            try c.audit.map {
                [
                    e(ConsoleHTML.time($0.at)), e($0.operator), e($0.action), e($0.reason),
                    ConsoleHTML.details("before / after", json: try SupportJSON.pretty(["before": $0.before, "after": $0.after])),
                ]
            }, id: "audit")
        if let user = c.user {
            let hidden = back.merging(["userId": user.userId]) { a, _ in a }
            html += "<h2>User actions</h2>"
            html += ConsoleHTML.actionForm(
                "test-user", title: user.isTestUser ? "Clear the test-user flag" : "Flag as test user", csrf: csrf,
                hidden: hidden.merging(["enabled": user.isTestUser ? "false" : "true"]) { a, _ in a })
            html += ConsoleHTML.actionForm(
                "adjust-credits", title: "Adjust credits", csrf: csrf, hidden: hidden,
                inputs: [
                    ("pool", "Pool (SUBSCRIPTION, WELCOME, PERMANENT)"), ("amount", "Credits (e.g. 3 or -2.5)"), ("number", "Adjustment number"),
                ])
        }
        return ConsoleHTML.page(title: "Case \(q)", principal: context.principal, csrf: csrf, html)
    }

    func queuePage(_ context: AdminRequestContext) async throws -> HTTPResponse {
        let e = ConsoleHTML.escape
        let csrf = context.csrf ?? ""
        let counts = try await routes.queue.eventSummary(now: routes.clock.now())
        var html = ""
        let groups: [(String, (EventCount) -> Bool)] = [
            ("Unmatched", { $0.status == "DEAD" && ($0.errorCode ?? "").hasPrefix("UNMATCHED_") }),
            ("Dead", { $0.status == "DEAD" && !($0.errorCode ?? "").hasPrefix("UNMATCHED_") }),
            ("Waiting for a retry", { $0.status == "RETRY_WAIT" }),
        ]
        for (title, belongs) in groups {
            html += "<h2>\(e(title))</h2>"
            html += ConsoleHTML.table(
                ["error code", "events", "oldest", "action"],
                counts.filter(belongs).map { count in
                    [
                        e(count.errorCode ?? "–"), e(String(count.count)), e("\(count.oldestAgeSeconds) s"),
                        count.status == "DEAD" && count.errorCode != nil
                            ? ConsoleHTML.actionForm(
                                "replay-code", title: "Replay all \(count.count)", csrf: csrf, hidden: ["errorCode": count.errorCode ?? ""])
                            : "",
                    ]
                })
        }
        let recent = try await routes.queue.events(status: "DEAD", errorCode: nil, beforeID: nil, limit: 50)
        html += "<h2>Latest dead events</h2>"
        html += ConsoleHTML.table(
            ["event", "error", "chain", "received", "case", "action"],
            recent.map { event in
                let chain = event.originalTransactionId ?? ""
                return [
                    e(String(event.eventId)), e(event.errorCode ?? ""), e(chain), e(ConsoleHTML.time(event.receivedAt)),
                    chain.isEmpty
                        ? "" : "<a href=\"/admin/case?q=\(e(chain.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""))\">open</a>",
                    ConsoleHTML.actionForm("replay-event", title: "Replay", csrf: csrf, hidden: ["eventId": String(event.eventId)]),
                ]
            })
        // Notifications Apple sent while we could not take them: its history over a range.
        html += "<h2>Recover notifications from Apple's history</h2>"
        html += ConsoleHTML.actionForm(
            "recover", title: "Recover", csrf: csrf, hidden: [:],
            inputs: [
                ("from", "From (RFC 3339)"), ("to", "To (RFC 3339)"), ("environment", "Environment (Production or Sandbox)"),
            ])
        return ConsoleHTML.page(title: "Queue", principal: context.principal, csrf: csrf, html)
    }

    // MARK: Actions

    /// One console action: the admin API action it runs, the fields that fill its path, and those of its body.
    struct Action: Sendable {
        let title: String
        let pathFields: [String]
        let bodyFields: [String]
        let run: @Sendable (AdminRoutes, HTTPRequest, AdminPrincipal) async throws -> HTTPResponse
    }

    static let actions: [String: Action] = [
        "replay-event": Action(title: "Replay event", pathFields: ["eventId"], bodyFields: []) { try await $0.replayEvent($1, operator: $2) },
        "replay-code": Action(title: "Replay every DEAD event with this code", pathFields: [], bodyFields: ["errorCode"]) {
            try await $0.replayCode($1, operator: $2)
        },
        "requery": Action(title: "Re-query the chain from Apple", pathFields: ["originalTransactionId"], bodyFields: ["environment"]) {
            try await $0.requery($1, operator: $2)
        },
        "attribute": Action(
            title: "Attribute the chain", pathFields: ["originalTransactionId"], bodyFields: ["environment", "userId"]
        ) { try await $0.attribute($1, operator: $2) },
        "unfreeze": Action(
            title: "Unfreeze the chain", pathFields: ["originalTransactionId"], bodyFields: ["environment", "ownerUserId"]
        ) { try await $0.unfreeze($1, operator: $2) },
        "test-user": Action(title: "Set the test-user flag", pathFields: ["userId"], bodyFields: ["enabled"]) {
            try await $0.setTestUser($1, operator: $2)
        },
        "adjust-credits": Action(title: "Adjust credits", pathFields: ["userId"], bodyFields: ["pool", "amount", "number"]) {
            try await $0.adjustCredits($1, operator: $2)
        },
        "recover": Action(title: "Recover notification history", pathFields: [], bodyFields: ["from", "to", "environment"]) {
            try await $0.recover($1, operator: $2)
        },
    ]

    func act(_ request: HTTPRequest, _ context: AdminRequestContext) async throws -> HTTPResponse {
        let e = ConsoleHTML.escape
        let csrf = context.csrf ?? ""
        let principal = try context.requirePrincipal()
        guard let name = request.pathParameter("action"), let action = Self.actions[name] else {
            return ConsoleHTML.page(title: "Unknown action", principal: principal, csrf: csrf, status: 404, "<p>No such action.</p>")
        }
        guard principal.role == .operator else {
            return ConsoleHTML.page(
                title: "Not allowed", principal: principal, csrf: csrf, status: 403,
                "<p class=\"error\">Actions need an operator token; yours is a viewer's.</p>")
        }
        let fields = FormData.parse(String(decoding: request.body, as: UTF8.self))
        let back = fields["back"].map { "/admin/case?q=" + ($0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "") } ?? "/admin/queue"
        let shown = (action.pathFields + action.bodyFields + ["reason"]).compactMap { key in fields[key].map { (key, $0) } }
        guard fields["confirm"] == "yes" else {
            var html = "<p>\(e(action.title)) with:</p>"
            html += ConsoleHTML.table(["field", "value"], shown.map { [e($0.0), e($0.1)] })
            html += "<form method=\"post\" action=\"/admin/actions/\(e(name))\">\(ConsoleHTML.csrfField(csrf))"
            for (key, value) in fields.sorted(by: { $0.key < $1.key }) where key != "csrf" && key != "confirm" {
                html += "<input type=\"hidden\" name=\"\(e(key))\" value=\"\(e(value))\">"
            }
            html += "<input type=\"hidden\" name=\"confirm\" value=\"yes\"><button type=\"submit\" id=\"confirm\">Confirm</button> "
            html += "<a href=\"\(e(back))\">Cancel</a></form>"
            return ConsoleHTML.page(title: "Confirm: \(action.title)", principal: principal, csrf: csrf, html)
        }
        // The admin API's own handler, on the body it would have received.
        var body: [String: Any] = ["reason": fields["reason"] ?? ""]
        for key in action.bodyFields {
            guard let value = fields[key], !value.isEmpty else { continue }
            body[key] = key == "enabled" ? (value == "true") as Any : value as Any
        }
        var pathParameters: [String: String] = [:]
        for key in action.pathFields { pathParameters[key] = fields[key] ?? "" }
        let apiRequest = HTTPRequest(
            head: HTTPRequestHead(method: "POST", path: request.path, traceID: request.traceID),
            body: Array(try JSONSerialization.data(withJSONObject: body)), pathParameters: pathParameters)
        let answer: HTTPResponse
        do {
            answer = try await action.run(routes, apiRequest, principal)
        } catch {
            guard let refusal = (error as? HTTPError) ?? AdminRefusals.httpError(for: error) else { throw error }
            return ConsoleHTML.page(
                title: "Refused", principal: principal, csrf: csrf, status: refusal.status,
                "<p class=\"error\" id=\"result\">\(e(refusal.code)): \(e(refusal.message))</p><p><a href=\"\(e(back))\">Back</a></p>")
        }
        let json = (try? SupportJSON.pretty(bytes: answer.body)) ?? String(decoding: answer.body, as: UTF8.self)
        return ConsoleHTML.page(
            title: "Done: \(action.title)", principal: principal, csrf: csrf,
            "<p class=\"ok\" id=\"result\">Done, audited as \(e(principal.name)).</p><pre>\(e(json))</pre><p><a href=\"\(e(back))\" id=\"back\">Back</a></p>"
        )
    }
}

/// Indented JSON for people, dates as RFC 3339.
enum SupportJSON {
    static func pretty(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(RFC3339.string(from: date))
        }
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    static func pretty(bytes: [UInt8]) throws -> String {
        let object = try JSONSerialization.jsonObject(with: Data(bytes))
        let data = try JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
        return String(decoding: data, as: UTF8.self)
    }
}
