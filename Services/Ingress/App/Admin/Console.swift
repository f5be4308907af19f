import Credits
import Crypto
import Domain
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
        console.get("") { _, context in try await home(context) }
        console.get("case") { request, context in try await casePage(request, context) }
        console.get("queue") { _, context in try await queuePage(context) }
        console.post("logout") { request, context in try await logout(request, context) }
        console.post("actions/{action}") { request, context in try await act(request, context) }
        console.get("webhooks") { _, context in try await webhooksPage(context) }
        console.get("webhooks/{id}") { request, context in try await webhookPage(request, context) }
    }

    // MARK: Sign-in

    /// The form, with a fresh double-submit token (cookie and hidden field must match).
    func loginPage(failed: Bool) -> HTTPResponse {
        let nonce = Base64URL.encode(SecureRandom.bytes(24))
        let hours = String(Int(sessions.lifetime.absolute / 3600))
        let minutes = String(Int(sessions.lifetime.idle / 60))
        let error: HTML = failed ? "<p class=\"error\" id=\"login-error\">That is not an admin token.</p>" : ""
        let form = ConsoleHTML.postForm(
            "/admin/login", csrf: nonce,
            """

            <label>Admin token <input type="password" name="token" id="token" required autocomplete="off"></label>
            <button type="submit" id="sign-in">Sign in</button>
            """)
        let body: HTML = """
            \(error)
            \(form)
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

    static func searchForm(_ q: String = "") -> HTML {
        """
        <form method="get" action="/admin/case"><label>Any id (user, order, transaction, original transaction, notification UUID, account token)
        <input type="text" name="q" id="q" value="\(q)" required maxlength="200"></label>
        <button type="submit" id="search">Search</button></form>
        """
    }

    func casePage(_ request: HTTPRequest, _ context: AdminRequestContext) async throws -> HTTPResponse {
        let csrf = context.csrf ?? ""
        let q = request.query("q")?.trimmingCharacters(in: .whitespaces) ?? ""
        guard (1...200).contains(q.count) else { return try await home(context) }
        guard let found = try await routes.cases.lookup(q, now: routes.clock.now()) else {
            return ConsoleHTML.page(
                title: "Not found", principal: context.principal, csrf: csrf, status: 404,
                Self.searchForm(q) + "<p class=\"error\">Nothing has the id <code>\(q)</code>.</p>")
        }
        let page = CasePage(q: q, matches: found.matches, c: found.supportCase, csrf: csrf)
        return ConsoleHTML.page(title: "Case \(q)", principal: context.principal, csrf: csrf, try page.body())
    }

    func queuePage(_ context: AdminRequestContext) async throws -> HTTPResponse {
        let csrf = context.csrf ?? ""
        let counts = try await routes.queue.eventSummary(now: routes.clock.now())
        let groups: [(String, (EventCount) -> Bool)] = [
            ("Unmatched", { $0.status == "DEAD" && ($0.errorCode ?? "").hasPrefix("UNMATCHED_") }),
            ("Dead", { $0.status == "DEAD" && !($0.errorCode ?? "").hasPrefix("UNMATCHED_") }),
            ("Waiting for a retry", { $0.status == "RETRY_WAIT" }),
        ]
        var html = groups.map { title, belongs in
            ConsoleHTML.section(
                title,
                ConsoleHTML.table(
                    ["error code", "events", "oldest", "action"],
                    counts.filter(belongs).map { count in
                        let replay: HTML =
                            count.status == "DEAD" && count.errorCode != nil
                            ? ConsoleHTML.actionForm(
                                "replay-code", title: "Replay all \(count.count)", csrf: csrf, hidden: ["errorCode": count.errorCode ?? ""])
                            : ""
                        return [HTML(count.errorCode ?? "–"), HTML(String(count.count)), HTML("\(count.oldestAgeSeconds) s" as String), replay]
                    }))
        }.joined()
        let recent = try await routes.queue.events(status: "DEAD", errorCode: nil, beforeID: nil, limit: 50)
        html += ConsoleHTML.section(
            "Latest dead events",
            ConsoleHTML.table(
                ["event", "error", "chain", "received", "case", "action"],
                recent.map { event in
                    let chain = event.originalTransactionId ?? ""
                    let encoded = chain.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
                    let open: HTML = chain.isEmpty ? "" : "<a href=\"/admin/case?q=\(encoded)\">open</a>"
                    return [
                        HTML(String(event.eventId)), HTML(event.errorCode ?? ""), HTML(chain), HTML(ConsoleHTML.time(event.receivedAt)), open,
                        ConsoleHTML.actionForm("replay-event", title: "Replay", csrf: csrf, hidden: ["eventId": String(event.eventId)]),
                    ]
                }))
        // Notifications Apple sent while we could not take them: its history over a range.
        html += ConsoleHTML.section(
            "Recover notifications from Apple's history",
            ConsoleHTML.actionForm(
                "recover", title: "Recover", csrf: csrf, hidden: [:],
                inputs: [
                    ("from", "From (RFC 3339)"), ("to", "To (RFC 3339)"), ("environment", "Environment (Production or Sandbox)"),
                ]))
        return ConsoleHTML.page(title: "Queue", principal: context.principal, csrf: csrf, html)
    }

    // MARK: Actions

    /// One console action: the admin API action it runs, the fields that fill its path, and those of its body.
    struct Action: Sendable {
        let title: String
        let pathFields: [String]
        let bodyFields: [String]
        /// Where the result page leads back to when the form names no case (`back`).
        var back: (@Sendable ([String: String]) -> String)? = nil
        /// Its answer carries a secret shown this once.
        var showsSecret = false
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
        "restore-consent": Action(title: "Restore the rescinded consent", pathFields: ["userId"], bodyFields: []) {
            try await $0.restoreConsent($1, operator: $2)
        },
        "adjust-credits": Action(title: "Adjust credits", pathFields: ["userId"], bodyFields: ["pool", "amount", "number"]) {
            try await $0.adjustCredits($1, operator: $2)
        },
        "recover": Action(title: "Recover notification history", pathFields: [], bodyFields: ["from", "to", "environment"]) {
            try await $0.recover($1, operator: $2)
        },
        "grant-entitlement": Action(
            title: "Grant an entitlement", pathFields: ["userId", "entitlement"], bodyFields: ["duration"]
        ) { try await $0.entitlements.grant($1, operator: $2) },
        "revoke-entitlement": Action(title: "Revoke the promotional grants", pathFields: ["userId", "entitlement"], bodyFields: []) {
            try await $0.entitlements.revoke($1, operator: $2)
        },
    ]

    func act(_ request: HTTPRequest, _ context: AdminRequestContext) async throws -> HTTPResponse {
        let csrf = context.csrf ?? ""
        let principal = try context.requirePrincipal()
        guard let name = request.pathParameter("action"), let action = Self.actions[name] ?? Self.webhookActions[name] else {
            return ConsoleHTML.page(title: "Unknown action", principal: principal, csrf: csrf, status: 404, "<p>No such action.</p>")
        }
        guard principal.role == .operator else {
            return ConsoleHTML.page(
                title: "Not allowed", principal: principal, csrf: csrf, status: 403,
                "<p class=\"error\">Actions need an operator token; yours is a viewer's.</p>")
        }
        let fields = FormData.parse(String(decoding: request.body, as: UTF8.self))
        let back = fields["back"].map(ConsoleHTML.caseHref) ?? action.back?(fields) ?? "/admin/queue"
        let shown = (action.pathFields + action.bodyFields + ["reason"]).compactMap { key in fields[key].map { (key, $0) } }
        guard fields["confirm"] == "yes" else {
            // The confirmation posts the same fields again, confirmed.
            let carried = fields.sorted { $0.key < $1.key }.filter { $0.key != "csrf" && $0.key != "confirm" }
                .map { ConsoleHTML.hiddenField($0.key, $0.value) }.joined()
            let buttons: HTML = "<button type=\"submit\" id=\"confirm\">Confirm</button> <a href=\"\(back)\">Cancel</a>"
            let confirm = ConsoleHTML.postForm(
                "/admin/actions/\(name)", csrf: csrf, carried + ConsoleHTML.hiddenField("confirm", "yes") + buttons)
            return ConsoleHTML.page(
                title: "Confirm: \(action.title)", principal: principal, csrf: csrf,
                "<p>\(action.title) with:</p>\(ConsoleHTML.table(["field", "value"], shown.map { [HTML($0.0), HTML($0.1)] }))\(confirm)")
        }
        // The admin API's own handler, on the body it would have received.
        var body: [String: Any] = ["reason": fields["reason"] ?? ""]
        for key in action.bodyFields {
            guard let value = fields[key], !value.isEmpty else { continue }
            body[key] = Self.bodyValue(key, value)
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
                "<p class=\"error\" id=\"result\">\(refusal.code): \(refusal.message)</p><p><a href=\"\(back)\">Back</a></p>")
        }
        let json = (try? SupportJSON.pretty(bytes: answer.body)) ?? String(decoding: answer.body, as: UTF8.self)
        let secret: HTML =
            action.showsSecret
            ? "<p class=\"error\" id=\"secret-once\">The signing secret below is shown this once: copy it to the receiver now.</p>" : ""
        return ConsoleHTML.page(
            title: "Done: \(action.title)", principal: principal, csrf: csrf,
            "<p class=\"ok\" id=\"result\">Done, audited as \(principal.name).</p>\(secret)<pre>\(json)</pre><p><a href=\"\(back)\" id=\"back\">Back</a></p>"
        )
    }

    /// A form field as the admin API's JSON body has it: flags as booleans, lists (comma- or
    /// space-separated in the form) as arrays.
    static func bodyValue(_ key: String, _ value: String) -> Any {
        switch key {
        case "enabled": value == "true"
        case "eventTypes", "environments": value.split { $0 == "," || $0.isWhitespace }.map(String.init)
        default: value
        }
    }
}

/// The case page, one rendering function per section, each reading only the support case.
struct CasePage {
    let q: String
    let matches: [CaseMatch]
    let c: SupportCase
    let csrf: String

    func body() throws -> HTML {
        let sections: [HTML] = try [
            Console.searchForm(q), matchList, access, "<div class=\"top\">\(who)\(status)\(credits)</div>", timeline, events(), outboundEvents,
            chains(),
            orders(),
            transactions(), grants, ledger, consumptionAnswers, audit(), userActions,
        ]
        return sections.joined()
    }

    /// Every action form brings the operator back to this case.
    func hidden(_ fields: [String: String]) -> [String: String] { fields.merging(["back": q]) { a, _ in a } }

    var matchList: HTML {
        "<p id=\"matches\">Matches: \(matches.map { "\($0.kind) <code>\($0.id)</code>" as HTML }.joined(separator: ", "))</p>"
    }

    /// What the user has now, in words, first: the question most support cases start with; then
    /// each entitlement, the promotional grants with their revoke buttons, and a grant form.
    var access: HTML {
        guard let user = c.user, let overview = c.entitlements else { return "" }
        let total = c.balances.reduce(Int64(0)) { $0 &+ $1.balance }
        let words = "\(overview.summary); \(CasePage.grouped(CreditAmount.decimal(total))) credits"
        let items = ConsoleHTML.table(
            ["entitlement", "active", "source", "status", "product", "until", "renews"],
            overview.entitlements.map { item in
                [
                    HTML(item.entitlement), item.active ? "<span class=\"ACTIVE\">yes</span>" : "no", HTML(item.source.rawValue),
                    HTML(item.status?.rawValue ?? "–"), HTML(item.productID ?? "–"), HTML(ConsoleHTML.time(item.expiresAt)),
                    item.willRenew ? "yes" : "no",
                ]
            }, id: "entitlements")
        let fields = hidden(["userId": user.userId])
        let grants = ConsoleHTML.table(
            ["grant", "entitlement", "from", "until", "by", "reason", "state", "action"],
            overview.grants.map { grant in
                let state: HTML =
                    grant.revokedAt.map { "revoked \(ConsoleHTML.time($0)) by \(grant.revokedBy ?? "?")" as HTML }
                    ?? (grant.inForce ? "<span class=\"ACTIVE\">in force</span>" : "ended")
                let revoke: HTML =
                    grant.inForce
                    ? ConsoleHTML.actionForm(
                        "revoke-entitlement", title: "Revoke \(grant.entitlement)", csrf: csrf,
                        hidden: fields.merging(["entitlement": grant.entitlement]) { a, _ in a }) : ""
                return [
                    HTML(String(grant.grantId)), HTML(grant.entitlement), HTML(ConsoleHTML.time(grant.startsAt)),
                    HTML(ConsoleHTML.time(grant.expiresAt)), HTML(grant.grantedBy), HTML(grant.reason), state, revoke,
                ]
            }, id: "entitlement-grants")
        let grantForm = ConsoleHTML.actionForm(
            "grant-entitlement", title: "Grant an entitlement", csrf: csrf, hidden: fields,
            inputs: [("entitlement", "Entitlement (e.g. pro)"), ("duration", "For (ISO 8601, e.g. P7D)")])
        return ConsoleHTML.section(
            "Access now", id: "access",
            "<p id=\"access-summary\"><strong>\(words)</strong></p>\(items)<h3>Promotional grants</h3>\(grants)\(grantForm)")
    }

    /// A decimal amount with thousands separated by commas ("5000" → "5,000"; "1234.5" → "1,234.5").
    static func grouped(_ decimal: String) -> String {
        let negative = decimal.hasPrefix("-")
        let unsigned = negative ? String(decimal.dropFirst()) : decimal
        let parts = unsigned.split(separator: ".", maxSplits: 1)
        var whole = String(parts.first ?? "0")
        var groups: [String] = []
        while whole.count > 3 {
            groups.insert(String(whole.suffix(3)), at: 0)
            whole = String(whole.dropLast(3))
        }
        groups.insert(whole, at: 0)
        return (negative ? "-" : "") + groups.joined(separator: ",") + (parts.count > 1 ? "." + parts[1] : "")
    }

    var who: HTML {
        guard let user = c.user else { return ConsoleHTML.section("Who", id: "who", "<p>No user owns this yet.</p>") }
        let tokens = user.appAccountTokens.map { "<code>\($0)</code>" as HTML }.joined(separator: ", ")
        return ConsoleHTML.section(
            "Who", id: "who",
            "<p>User <strong id=\"user-id\">\(user.userId)</strong>\(user.isTestUser ? " (test user)" : "")<br>Account tokens: \(tokens)</p>"
                + rescinded)
    }

    /// A withdrawn consent is why every entitlement reads off: said where support looks first.
    private var rescinded: HTML {
        guard let at = c.user?.consentRescindedAt else { return "" }
        return
            "<p class=\"error\" id=\"consent-rescinded\">Consent rescinded (RESCIND_CONSENT) at \(ConsoleHTML.time(at)): every entitlement reads inactive and no credit is spent.</p>"
    }

    var status: HTML {
        ConsoleHTML.section(
            "Status", id: "status",
            ConsoleHTML.table(
                ["chain", "status", "product", "expires", "owner"],
                c.chains.map { chain in
                    let frozen: HTML = chain.frozenReason.map { " <span class=\"error\">frozen: \($0)</span>" } ?? ""
                    return [
                        "\(chain.environment):\(chain.originalTransactionId)",
                        "<span class=\"\(chain.status ?? "")\">\(chain.status ?? "no subscription")</span>\(frozen)",
                        HTML(chain.activeProductId ?? "–"), HTML(ConsoleHTML.time(chain.expiresAt)),
                        HTML(chain.userId ?? chain.binding?.userId ?? "–"),
                    ]
                }))
    }

    var credits: HTML {
        ConsoleHTML.section(
            "Credits", id: "credits",
            ConsoleHTML.table(["pool", "balance"], c.balances.map { [HTML($0.pool), HTML(CreditAmount.decimal($0.balance))] }))
    }

    var timeline: HTML {
        ConsoleHTML.section(
            "Timeline",
            ConsoleHTML.table(
                ["at", "kind", "id", "what"], c.timeline.map { [HTML(ConsoleHTML.time($0.at)), HTML($0.kind), HTML($0.id), HTML($0.summary)] },
                id: "timeline"))
    }

    func events() throws -> HTML {
        let rows = try c.events.map { event -> [HTML] in
            let what = event.notificationType.map { $0 + (event.subtype.map { "/" + $0 } ?? "") } ?? "\(event.submissionKind ?? "") submission"
            let replay: HTML =
                event.status == "DEAD"
                ? ConsoleHTML.actionForm("replay-event", title: "Replay", csrf: csrf, hidden: hidden(["eventId": String(event.eventId)])) : ""
            return [
                HTML(String(event.eventId)), HTML(what), "<span class=\"\(event.status)\">\(event.status)</span> \(event.errorCode ?? "")",
                HTML(String(event.attempts)), HTML(ConsoleHTML.time(event.receivedAt)),
                ConsoleHTML.details("event \(event.eventId)", json: try SupportJSON.pretty(event)), replay,
            ]
        }
        return ConsoleHTML.section(
            "Events", ConsoleHTML.table(["event", "what", "status", "attempts", "received", "payload", "action"], rows, id: "events"))
    }

    /// Each chain's decoded state and the actions on it.
    func chains() throws -> HTML {
        let each = try c.chains.map { chain -> HTML in
            let fields = hidden(["originalTransactionId": chain.originalTransactionId, "environment": chain.environment])
            let unfreeze: HTML =
                chain.frozenReason == nil
                ? ""
                : ConsoleHTML.actionForm(
                    "unfreeze", title: "Unfreeze in favour of", csrf: csrf, hidden: fields, inputs: [("ownerUserId", "Owner user id")])
            let parts: [HTML] = [
                "<h3>\(chain.environment):\(chain.originalTransactionId)</h3>", ConsoleHTML.details("chain", json: try SupportJSON.pretty(chain)),
                ConsoleHTML.actionForm("requery", title: "Re-query from Apple", csrf: csrf, hidden: fields),
                ConsoleHTML.actionForm("attribute", title: "Attribute to a user", csrf: csrf, hidden: fields, inputs: [("userId", "User id")]),
                unfreeze,
            ]
            return parts.joined()
        }
        return ConsoleHTML.section("Chains", each.joined())
    }

    func orders() throws -> HTML {
        let rows = try c.orders.map { order -> [HTML] in
            [
                HTML(order.orderNo), HTML(order.productId), HTML(order.orderType), HTML(order.status), HTML(ConsoleHTML.time(order.createdAt)),
                ConsoleHTML.details("\(order.history.count) changes", json: try SupportJSON.pretty(order.history)),
            ]
        }
        return ConsoleHTML.section("Orders", ConsoleHTML.table(["order", "product", "type", "status", "created", "history"], rows))
    }

    func transactions() throws -> HTML {
        let rows = try c.transactions.map { t -> [HTML] in
            [
                HTML(t.transactionId), HTML(t.productId), HTML(ConsoleHTML.time(t.purchaseDate)), HTML(ConsoleHTML.time(t.expiresDate)),
                HTML(ConsoleHTML.time(t.revocationDate)), ConsoleHTML.details("decoded payload", json: try SupportJSON.pretty(t)),
            ]
        }
        return ConsoleHTML.section(
            "Transactions",
            ConsoleHTML.table(["transaction", "product", "purchased", "expires", "revoked", "signed fact"], rows, id: "transactions"))
    }

    var grants: HTML {
        let rows = c.grants.map { grant -> [HTML] in
            [
                HTML(grant.grantKey), HTML(grant.pool), HTML(CreditAmount.decimal(grant.amount)), HTML(CreditAmount.decimal(grant.revokedAmount)),
                HTML(grant.reason), HTML(ConsoleHTML.time(grant.createdAt)),
            ]
        }
        return ConsoleHTML.section("Grants", ConsoleHTML.table(["key", "pool", "credits", "revoked", "reason", "at"], rows))
    }

    var ledger: HTML {
        let rows = c.ledger.map { entry -> [HTML] in
            [
                HTML(String(entry.id)), HTML(entry.pool), HTML(CreditAmount.decimal(entry.delta)), HTML(CreditAmount.decimal(entry.balanceAfter)),
                HTML(entry.entryType), HTML(entry.reference), HTML(ConsoleHTML.time(entry.at)),
            ]
        }
        return ConsoleHTML.section("Ledger", ConsoleHTML.table(["id", "pool", "delta", "balance after", "type", "reference", "at"], rows))
    }

    var consumptionAnswers: HTML {
        let rows = c.consumptionAnswers.map { [HTML($0.notificationUUID), HTML($0.outcome), HTML(ConsoleHTML.time($0.createdAt))] }
        return ConsoleHTML.section("Consumption answers", ConsoleHTML.table(["notification", "outcome", "at"], rows))
    }

    func audit() throws -> HTML {
        let rows = try c.audit.map { entry -> [HTML] in
            [
                HTML(ConsoleHTML.time(entry.at)), HTML(entry.operator), HTML(entry.action), HTML(entry.reason),
                ConsoleHTML.details("before / after", json: try SupportJSON.pretty(["before": entry.before, "after": entry.after])),
            ]
        }
        return ConsoleHTML.section("Audit", ConsoleHTML.table(["at", "operator", "action", "reason", "states"], rows, id: "audit"))
    }

    var userActions: HTML {
        guard let user = c.user else { return "" }
        let fields = hidden(["userId": user.userId])
        return ConsoleHTML.section(
            "User actions",
            ConsoleHTML.actionForm(
                "test-user", title: user.isTestUser ? "Clear the test-user flag" : "Flag as test user", csrf: csrf,
                hidden: fields.merging(["enabled": user.isTestUser ? "false" : "true"]) { a, _ in a })
                + (user.consentRescindedAt == nil
                    ? "" : ConsoleHTML.actionForm("restore-consent", title: "Restore the consent", csrf: csrf, hidden: fields))
                + ConsoleHTML.actionForm(
                    "adjust-credits", title: "Adjust credits", csrf: csrf, hidden: fields,
                    inputs: [
                        ("pool", "Pool (SUBSCRIPTION, WELCOME, PERMANENT)"), ("amount", "Credits (e.g. 3 or -2.5)"), ("number", "Adjustment number"),
                    ]))
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
