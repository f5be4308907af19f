import Domain
import Foundation
import HTTPServer
import Postgres
import ServiceRuntime
import Storage
import TestSupport
import Testing

@testable import IngressApp

/// The support console's pages through the admin router, as a browser without JavaScript uses
/// them: cookies, form posts, redirects.
@Suite(.timeLimit(.minutes(3)))
struct ConsoleRouteTests {
    /// A browser's cookie jar over the admin router.
    final class Browser: @unchecked Sendable {
        let admin: AdminTestApp
        var cookies: [String: String] = [:]

        init(_ admin: AdminTestApp, cookies: [String: String] = [:]) {
            self.admin = admin
            self.cookies = cookies
        }

        func send(_ method: String, _ target: String, form: [String: String]? = nil) async -> TestResponse {
            let (path, query) = IngressTestApp.split(target)
            var headers = ["cookie": cookies.map { "\($0.key)=\($0.value)" }.joined(separator: "; ")]
            var body: [UInt8] = []
            if let form {
                headers["content-type"] = "application/x-www-form-urlencoded"
                body = Array(
                    form.map { "\($0.key)=\($0.value.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")" }
                        .joined(separator: "&").utf8)
            }
            let response = await admin.router.handle(
                HTTPRequest(head: HTTPRequestHead(method: method, path: path, query: query, headers: headers), body: body))
            for (name, value) in response.headers where name == "Set-Cookie" {
                let pair = value.split(separator: ";")[0].split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let cookie = String(pair[0])
                if value.contains("Max-Age=0") { cookies[cookie] = nil } else { cookies[cookie] = String(pair[1]) }
            }
            return TestResponse(response)
        }

        /// The value of a hidden field named `name` on a page.
        static func field(_ name: String, in html: String) -> String? {
            guard let range = html.range(of: #"name="\#(name)" value="([^"]*)""#, options: .regularExpression) else { return nil }
            let match = html[range]
            return match.split(separator: "\"").dropFirst(3).first.map(String.init)
        }

        func signIn(_ token: String) async throws -> TestResponse {
            let page = await send("GET", "/admin/login")
            let nonce = try #require(Self.field("csrf", in: page.text))
            return await send("POST", "/admin/login", form: ["token": token, "csrf": nonce])
        }
    }

    @Test func signInSearchAndSignOut() async throws {
        try await AdminTestApp.with { admin in
            let browser = Browser(admin)
            let before = await browser.send("GET", "/admin/")
            #expect(before.status == 303)
            #expect(before.header("Location") == "/admin/login")
            let login = await browser.send("GET", "/admin/login")
            #expect(login.status == 200)
            #expect(login.text.contains("name=\"token\""))
            #expect(login.header("Set-Cookie")?.contains("HttpOnly; SameSite=Strict") == true)

            let wrong = try await browser.signIn("not-a-token")
            #expect(wrong.status == 401)
            #expect(browser.cookies[ConsoleSessions.cookie] == nil)
            // A sign-in without the page's own token (posted from elsewhere) is refused.
            let forged = await browser.send("POST", "/admin/login", form: ["token": admin.operatorToken, "csrf": "guess"])
            #expect(forged.status == 401)

            let signed = try await browser.signIn(admin.operatorToken)
            #expect(signed.status == 303, "\(signed.text)")
            #expect(signed.header("Location") == "/admin/")
            #expect(
                signed.response.headers.contains {
                    $0.0 == "Set-Cookie" && $0.1.hasPrefix("admin_session=") && $0.1.contains("HttpOnly; SameSite=Strict")
                })
            #expect(signed.response.headers.first { $0.1.hasPrefix("admin_session=") }?.1.contains("; Secure") == true)
            let session = try #require(browser.cookies[ConsoleSessions.cookie])
            #expect(!session.contains(admin.operatorToken), "the cookie holds a session id, not the admin token")
            let home = await browser.send("GET", "/admin/")
            #expect(home.status == 200)
            #expect(home.text.contains("signed in as alice (operator)"))
            #expect(home.header("Content-Security-Policy")?.contains("default-src 'none'") == true)
            #expect(!home.text.contains("<script"))

            let csrf = try #require(Browser.field("csrf", in: home.text))
            let noToken = await browser.send("POST", "/admin/logout", form: [:])
            #expect(noToken.status == 403)
            let out = await browser.send("POST", "/admin/logout", form: ["csrf": csrf])
            #expect(out.status == 303)
            #expect(browser.cookies[ConsoleSessions.cookie] == nil)
            #expect(await browser.send("GET", "/admin/queue").status == 303)

            // A copy of the cookie taken before the sign-out opens nothing afterwards.
            browser.cookies[ConsoleSessions.cookie] = session
            let copied = await browser.send("GET", "/admin/queue")
            #expect(copied.status == 303)
            #expect(copied.header("Location") == "/admin/login")
            #expect(await browser.send("POST", "/admin/logout", form: ["csrf": csrf]).status == 401)
            #expect(try await admin.app.count("SELECT count(*) FROM console_session") == 0)
        }
    }

    @Test func theCookieIsNoBearerTokenAndTheTokenNoCookie() async throws {
        try await AdminTestApp.with { admin in
            let browser = Browser(admin)
            #expect(try await browser.signIn(admin.operatorToken).status == 303)
            let session = try #require(browser.cookies[ConsoleSessions.cookie])
            #expect(try await admin.request("GET", "/admin/v1/lookup?q=x", token: session).status == 401)
            #expect(try await admin.request("GET", "/admin/v1/lookup?q=x", token: admin.operatorToken).status == 404)
            // The cookie of earlier releases: the admin token itself.
            let old = Browser(admin)
            old.cookies[ConsoleSessions.cookie] = admin.operatorToken
            let refused = await old.send("GET", "/admin/")
            #expect(refused.status == 303)
            #expect(refused.header("Location") == "/admin/login")
        }
    }

    @Test func cookiesDropSecureOnlyWhenConfiguredForPlainHTTP() async throws {
        try await AdminTestApp.with { admin in
            let secure = await Browser(admin).send("GET", "/admin/login")
            #expect(secure.header("Set-Cookie")?.hasSuffix("; Secure") == true)
            let local = try admin.restarted(extra: ["ADMIN_COOKIE_INSECURE": "true"])
            let browser = Browser(local)
            let page = await browser.send("GET", "/admin/login")
            #expect(page.header("Set-Cookie")?.contains("HttpOnly; SameSite=Strict") == true)
            #expect(page.header("Set-Cookie")?.contains("Secure") == false)
            let signed = try await browser.signIn(admin.operatorToken)
            let cookie = try #require(signed.response.headers.first { $0.1.hasPrefix("admin_session=") }?.1)
            #expect(cookie.contains("HttpOnly; SameSite=Strict") && !cookie.contains("Secure"))
        }
    }

    @Test func aSessionClosesAfterItsLifetimeAndWhenIdle() async throws {
        try await AdminTestApp.with { admin in
            let clock = ManualClock(Date())
            let timed = try admin.restarted(extra: ["ADMIN_SESSION_HOURS": "2", "ADMIN_SESSION_IDLE_MINUTES": "30"], clock: clock)
            let busy = Browser(timed)
            #expect(try await busy.signIn(admin.operatorToken).status == 303)
            // A click every 25 minutes keeps it open, until 2 hours after the sign-in.
            for _ in 0..<4 {
                clock.advance(by: 25 * 60)
                #expect(await busy.send("GET", "/admin/").status == 200)
            }
            clock.advance(by: 25 * 60)
            let late = await busy.send("GET", "/admin/")
            #expect(late.status == 303)
            #expect(late.header("Location") == "/admin/login")
            let sessions = "SELECT count(*) FROM console_session"
            #expect(try await admin.app.count(sessions) == 1)

            // Closed sessions go at the next sign-in; open ones stay.
            let idle = Browser(timed)
            #expect(try await idle.signIn(admin.operatorToken).status == 303)
            #expect(try await admin.app.count(sessions) == 1)
            clock.advance(by: 29 * 60)
            #expect(await idle.send("GET", "/admin/").status == 200)
            #expect(try await Browser(timed).signIn(admin.viewerToken).status == 303)
            #expect(try await admin.app.count(sessions) == 2)
            clock.advance(by: 31 * 60)
            #expect(await idle.send("GET", "/admin/").status == 303)
            #expect(try await Browser(timed).signIn(admin.viewerToken).status == 303)
            #expect(try await admin.app.count(sessions) == 1)
        }
    }

    @Test func aSessionClosesWhenItsCredentialLeavesTheConfiguration() async throws {
        try await AdminTestApp.with { admin in
            let alice = Browser(admin)
            let bob = Browser(admin)
            #expect(try await alice.signIn(admin.operatorToken).status == 303)
            #expect(try await bob.signIn(admin.viewerToken).status == 303)

            // Restarted without alice's token: her session is refused, bob's stays.
            let withoutAlice = try admin.restarted(extra: ["ADMIN_TOKENS": "bob:viewer:\(admin.viewerToken)"])
            #expect(await Browser(withoutAlice, cookies: alice.cookies).send("GET", "/admin/").status == 303)
            #expect(await Browser(withoutAlice, cookies: bob.cookies).send("GET", "/admin/").status == 200)

            // The name and role are the configuration's of the moment; a new token closes the session.
            let demoted = try admin.restarted(
                extra: ["ADMIN_TOKENS": "alice:viewer:\(admin.operatorToken),bob:viewer:\(admin.viewerToken)"])
            #expect(await Browser(demoted, cookies: alice.cookies).send("GET", "/admin/").text.contains("alice (viewer)"))
            let renamed = try admin.restarted(
                extra: ["ADMIN_TOKENS": "carol:operator:\(admin.operatorToken),bob:viewer:\(admin.viewerToken)"])
            #expect(await Browser(renamed, cookies: alice.cookies).send("GET", "/admin/").status == 303)
            let rotated = try admin.restarted(
                extra: ["ADMIN_TOKENS": "alice:operator:\(admin.operatorToken)x,bob:viewer:\(admin.viewerToken)"])
            #expect(await Browser(rotated, cookies: alice.cookies).send("GET", "/admin/").status == 303)
            #expect(await Browser(admin, cookies: alice.cookies).send("GET", "/admin/").status == 200)
        }
    }

    @Test func eachSessionHasItsOwnCSRFToken() async throws {
        try await AdminTestApp.with { admin in
            let first = Browser(admin)
            let second = Browser(admin)
            #expect(try await first.signIn(admin.operatorToken).status == 303)
            #expect(try await second.signIn(admin.operatorToken).status == 303)
            let firstCSRF = try #require(Browser.field("csrf", in: await first.send("GET", "/admin/").text))
            let secondCSRF = try #require(Browser.field("csrf", in: await second.send("GET", "/admin/").text))
            #expect(firstCSRF != secondCSRF)
            let form = ["userId": "u1", "enabled": "true", "reason": "r", "confirm": "yes"]
            let crossed = await first.send("POST", "/admin/actions/test-user", form: form.merging(["csrf": secondCSRF]) { a, _ in a })
            #expect(crossed.status == 403)
            #expect(await first.send("POST", "/admin/logout", form: ["csrf": secondCSRF]).status == 403)
            #expect(try await admin.audits("TEST_USER_FLAGGED").isEmpty)
            let own = await first.send("POST", "/admin/actions/test-user", form: form.merging(["csrf": firstCSRF]) { a, _ in a })
            #expect(own.status == 200, "\(own.text)")
            #expect(try await admin.audits("TEST_USER_FLAGGED").map(\.operator) == ["alice"])
        }
    }

    @Test func signInAndSignOutAreLoggedWithTheOperatorOnly() async throws {
        try await AdminTestApp.with { admin in
            let logs = LogSink.memory()
            let browser = Browser(try admin.restarted(logs: logs))
            #expect(try await browser.signIn("not-a-token-but-long-enough-to-look-like-one").status == 401)
            #expect(try await browser.signIn(admin.operatorToken).status == 303)
            let session = try #require(browser.cookies[ConsoleSessions.cookie])
            let csrf = try #require(Browser.field("csrf", in: await browser.send("GET", "/admin/").text))
            #expect(await browser.send("POST", "/admin/logout", form: ["csrf": csrf]).status == 303)
            let lines = logs.lines
            #expect(lines.contains { $0.contains("console sign-in refused") })
            #expect(lines.contains { $0.contains("\"console sign-in\"") && $0.contains("\"admin.operator\":\"alice\"") })
            #expect(lines.contains { $0.contains("\"console sign-out\"") && $0.contains("\"admin.operator\":\"alice\"") })
            let output = lines.joined(separator: "\n")
            for secret in [admin.operatorToken, session, csrf, "not-a-token-but-long-enough"] {
                #expect(!output.contains(secret))
            }
        }
    }

    @Test func sessionSettingsAreValidated() {
        func admin(_ environment: [String: String]) -> (AdminSettings, [String]) {
            let reader = ConfigurationReader(environment: environment)
            return (AdminSettings(reader: reader), reader.problems.map(\.name))
        }
        let (defaults, none) = admin([:])
        #expect(none.isEmpty)
        #expect(defaults.sessionLifetime == 8 * 3600 && defaults.sessionIdleTimeout == 30 * 60 && !defaults.cookieInsecure)
        let (set, _) = admin(["ADMIN_SESSION_HOURS": "12", "ADMIN_SESSION_IDLE_MINUTES": "15", "ADMIN_COOKIE_INSECURE": "true"])
        #expect(set.sessionLifetime == 12 * 3600 && set.sessionIdleTimeout == 15 * 60 && set.cookieInsecure)
        #expect(admin(["ADMIN_SESSION_HOURS": "0"]).1 == ["ADMIN_SESSION_HOURS"])
        #expect(admin(["ADMIN_SESSION_IDLE_MINUTES": "never"]).1 == ["ADMIN_SESSION_IDLE_MINUTES"])
        #expect(admin(["ADMIN_COOKIE_INSECURE": "sometimes"]).1 == ["ADMIN_COOKIE_INSECURE"])
    }

    @Test func theHomePageListsWhatNeedsAttention() async throws {
        try await AdminTestApp.with { admin in
            let browser = Browser(admin)
            #expect(try await browser.signIn(admin.operatorToken).status == 303)
            let quiet = await browser.send("GET", "/admin/")
            #expect(quiet.status == 200)
            #expect(quiet.text.contains("Nothing needs attention."))

            try await admin.app.rows.applyDemoCatalogue()
            let original = String(UInt64.random(in: 1_000_000_000...9_999_999_999))
            try await admin.app.rows.addSubscription(
                user: "<b>frozen</b>", product: IngressTestApp.monthly, status: "ACTIVE", expiresAt: Date() + 86_400,
                originalTransactionID: original)
            try await admin.app.pool.query(
                "UPDATE user_subscription SET frozen_reason = 'ACCOUNT_CONFLICT' WHERE original_transaction_id = \(original)")
            let uuid = try await admin.notify(
                transactionID: String(UInt64.random(in: 2_000_000_000...2_999_999_999)), originalTransactionID: original)
            _ = try await admin.bury(uuid, code: "SIGNATURE_INVALID")
            // A second account paid on the frozen chain (the worker's account.conflict event).
            let paid = String(UInt64.random(in: 2_000_000_000...2_999_999_999))
            let conflict = OutboundEvent(
                key: "account.conflict:Sandbox:\(paid):payer", type: .accountConflict, userID: "<i>payer</i>", environment: "Sandbox",
                occurredAt: Date(),
                data: [
                    "productId": .string(IngressTestApp.monthly), "originalTransactionId": .string(original),
                    "transactionId": .string(paid), "otherUserId": .string("<b>frozen</b>"), "chainFrozen": .bool(true),
                    "cause": .string("apple.SUBSCRIBED.RESUBSCRIBE"),
                ])
            try await admin.app.pool.withConnection { db in
                _ = try await OutboundEventStore(pool: admin.app.pool).append([conflict], on: db)
            }

            let busy = await browser.send("GET", "/admin/")
            #expect(busy.status == 200)
            #expect(!busy.text.contains("Nothing needs attention."))
            #expect(busy.text.contains("SIGNATURE_INVALID</td><td>1 DEAD events"), "\(busy.text)")
            #expect(busy.text.contains("id=\"frozen-chains\""))
            #expect(busy.text.contains("ACCOUNT_CONFLICT"))
            #expect(busy.text.contains("/admin/case?q=\(original)"))
            #expect(busy.text.contains("&lt;b&gt;frozen&lt;/b&gt;"), "a user id renders as text")
            #expect(busy.text.contains("id=\"account-conflicts\""))
            #expect(busy.text.contains("&lt;i&gt;payer&lt;/i&gt;"), "the payer is listed, as text")
            #expect(busy.text.contains("/admin/case?q=\(paid)"))
            // Once the chain is unfrozen the conflict no longer needs anyone.
            try await admin.app.pool.query(
                "UPDATE user_subscription SET frozen_reason = NULL WHERE original_transaction_id = \(original)")
            #expect(!(await browser.send("GET", "/admin/")).text.contains("id=\"account-conflicts\""))
        }
    }

    @Test func theCasePageEscapesEverythingAndReplaysAfterAConfirmation() async throws {
        try await AdminTestApp.with { admin in
            try await admin.app.rows.applyDemoCatalogue()
            let user = "<script>alert('x')</script>"
            let order = try await admin.app.createOrder(user)
            #expect(order.status == 201 || order.status == 200)
            let original = String(UInt64.random(in: 1_000_000_000...9_999_999_999))
            try await admin.app.rows.addSubscription(
                user: user, product: IngressTestApp.monthly, status: "ACTIVE", expiresAt: Date() + 86_400,
                originalTransactionID: original)
            let transaction = String(UInt64.random(in: 2_000_000_000...2_999_999_999))
            let uuid = try await admin.notify(transactionID: transaction, originalTransactionID: original)
            let eventID = try await admin.bury(uuid, code: "UNMATCHED_PRODUCT")

            let browser = Browser(admin)
            #expect(try await browser.signIn(admin.operatorToken).status == 303)
            let page = await browser.send("GET", "/admin/case?q=\(transaction)")
            #expect(page.status == 200, "\(page.text)")
            #expect(!page.text.contains("<script>alert"), "a user id renders as text")
            #expect(page.text.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"))
            #expect(page.text.contains("id=\"timeline\""))
            #expect(page.text.contains("UNMATCHED_PRODUCT"))
            #expect(page.text.contains("<details>"), "signed facts open on demand")
            let csrf = try #require(Browser.field("csrf", in: page.text))

            let form = ["csrf": csrf, "eventId": String(eventID), "reason": "product added", "back": transaction]
            let confirm = await browser.send("POST", "/admin/actions/replay-event", form: form)
            #expect(confirm.status == 200)
            #expect(confirm.text.contains("id=\"confirm\""))
            #expect(try await admin.audits("DEAD_EVENT_REPLAYED").isEmpty, "nothing happens before the confirmation")
            let done = await browser.send("POST", "/admin/actions/replay-event", form: form.merging(["confirm": "yes"]) { a, _ in a })
            #expect(done.status == 200, "\(done.text)")
            #expect(done.text.contains("RECEIVED"))
            #expect(try await admin.audits("DEAD_EVENT_REPLAYED").map(\.operator) == ["alice"])
            let again = await browser.send("POST", "/admin/actions/replay-event", form: form.merging(["confirm": "yes"]) { a, _ in a })
            #expect(again.status == 409)
            #expect(again.text.contains("EVENT_NOT_REPLAYABLE"))
            let noReason = await browser.send(
                "POST", "/admin/actions/replay-code", form: ["csrf": csrf, "errorCode": "X", "reason": " ", "confirm": "yes"])
            #expect(noReason.status == 400)
            let forged = await browser.send(
                "POST", "/admin/actions/replay-event", form: ["eventId": String(eventID), "reason": "r", "confirm": "yes"])
            #expect(forged.status == 403)

            let queue = await browser.send("GET", "/admin/queue")
            #expect(queue.status == 200)
            #expect(queue.text.contains("Unmatched"))
            #expect(queue.text.contains("action=\"/admin/actions/recover\""), "the recovery has a form")
            let range = [
                "csrf": csrf, "from": RFC3339.string(from: Date() - 3600), "to": RFC3339.string(from: Date() - 60),
                "environment": "Sandbox", "reason": "outage", "confirm": "yes",
            ]
            let recovered = await browser.send("POST", "/admin/actions/recover", form: range)
            #expect(recovered.status == 200, "\(recovered.text)")
            #expect(try await admin.audits("RECOVERY_REQUESTED").map(\.operator) == ["alice"])
            let backwards = await browser.send("POST", "/admin/actions/recover", form: range.merging(["from": range["to"]!]) { _, new in new })
            #expect(backwards.status == 400)
        }
    }

    /// The case starts with what the user has now, in words; operators grant and revoke
    /// entitlements from it, each after a confirmation, audited.
    @Test func theCaseShowsAccessInWordsAndGrantsAndRevokes() async throws {
        try await AdminTestApp.with { admin in
            try await admin.app.rows.applyDemoCatalogue()
            let expires = try #require(RFC3339.date(from: "2037-01-05T10:00:00Z"))
            try await admin.app.rows.addSubscription(
                user: "u1", product: "com.example.pro.yearly", status: "ACTIVE", expiresAt: expires, originalTransactionID: "4000000001")
            try await admin.app.pool.query(
                "INSERT INTO credit_account (user_id, pool, balance) VALUES ('u1', 'PERMANENT', 5000000000)")
            let browser = Browser(admin)
            #expect(try await browser.signIn(admin.operatorToken).status == 303)
            let page = await browser.send("GET", "/admin/case?q=u1")
            #expect(page.status == 200, "\(page.text)")
            #expect(page.text.contains("<p id=\"access-summary\"><strong>pro until 2037-01-05, renews; 5,000 credits</strong></p>"), "\(page.text)")
            #expect(
                try #require(page.text.range(of: "id=\"access\"")).lowerBound < (try #require(page.text.range(of: "id=\"who\""))).lowerBound,
                "access comes first")
            let csrf = try #require(Browser.field("csrf", in: page.text))
            let grant = ["csrf": csrf, "userId": "u1", "entitlement": "beta", "duration": "P7D", "reason": "early access", "back": "u1"]
            #expect(await browser.send("POST", "/admin/actions/grant-entitlement", form: grant).text.contains("id=\"confirm\""))
            #expect(try await admin.audits("ENTITLEMENT_GRANTED").isEmpty, "nothing happens before the confirmation")
            let granted = await browser.send("POST", "/admin/actions/grant-entitlement", form: grant.merging(["confirm": "yes"]) { a, _ in a })
            #expect(granted.status == 200, "\(granted.text)")
            #expect(try await admin.audits("ENTITLEMENT_GRANTED").map(\.operator) == ["alice"])
            let after = await browser.send("GET", "/admin/case?q=u1")
            #expect(after.text.contains("beta (promotional) until "), "\(after.text)")
            #expect(after.text.contains("action=\"/admin/actions/revoke-entitlement\""))
            let revoke = ["csrf": csrf, "userId": "u1", "entitlement": "beta", "reason": "test over", "back": "u1", "confirm": "yes"]
            let revoked = await browser.send("POST", "/admin/actions/revoke-entitlement", form: revoke)
            #expect(revoked.status == 200, "\(revoked.text)")
            #expect(try await admin.audits("ENTITLEMENT_REVOKED").map(\.operator) == ["alice"])
            let again = await browser.send("POST", "/admin/actions/revoke-entitlement", form: revoke)
            #expect(again.status == 404 && again.text.contains("GRANT_NOT_FOUND"))
            let last = await browser.send("GET", "/admin/case?q=u1")
            #expect(!last.text.contains("action=\"/admin/actions/revoke-entitlement\""), "no button for a revoked grant")
        }
    }

    /// The case lists the user's outbound events with their deliveries; the home page lists the
    /// DEAD delivery with a link to that case, where an operator retries it after a confirmation.
    @Test func theCaseShowsOutboundEventsAndRetriesADeadDelivery() async throws {
        try await AdminTestApp.with { admin in
            try await admin.app.rows.applyDemoCatalogue()
            let user = "<i>u2</i>"
            try await admin.app.rows.addSubscription(
                user: user, product: IngressTestApp.monthly, status: "ACTIVE", expiresAt: Date() + 86_400)
            let created = try await admin.act("/admin/v1/webhooks", ["url": WebhookRouteTests.publicURL])
            let endpoint = try #require(try created.json()["id"] as? String, "\(created.text)")
            let event = try await admin.app.rows.addDeadDelivery(
                user: user, data: ["entitlement": .string("<script>pro</script>"), "expiresAt": .null, "count": .integer(3)],
                error: "<b>refused</b>")
            let browser = Browser(admin)
            #expect(try await browser.signIn(admin.operatorToken).status == 303)

            let home = await browser.send("GET", "/admin/")
            #expect(home.text.contains("1 DEAD deliveries"), "\(home.text)")
            #expect(home.text.contains("id=\"dead-deliveries\""))
            #expect(home.text.contains("href=\"/admin/case?q=%3Ci%3Eu2%3C%2Fi%3E\""), "the delivery leads to its user's case")
            #expect(home.text.contains("500: &lt;b&gt;refused&lt;/b&gt;"))
            #expect(!home.text.contains("<b>refused"))

            let page = await browser.send("GET", "/admin/case?q=\(user)")
            #expect(page.status == 200, "\(page.text)")
            let section = try #require(page.text.range(of: "id=\"outbound-events\"")).lowerBound
            let outbound = String(page.text[section...])
            #expect(outbound.contains(event) && outbound.contains("entitlement.granted"))
            #expect(outbound.contains("count=3, entitlement=&lt;script&gt;pro&lt;/script&gt;, expiresAt=null"), "\(outbound)")
            #expect(!page.text.contains("<script>pro"), "event data renders as text")
            #expect(outbound.contains("<span class=\"DEAD\">DEAD</span>"))
            #expect(outbound.contains("action=\"/admin/actions/retry-delivery\""))
            #expect(outbound.contains("href=\"/admin/webhooks/\(endpoint)\""))
            let csrf = try #require(Browser.field("csrf", in: page.text))

            let form = ["csrf": csrf, "id": endpoint, "eventId": event, "reason": "receiver fixed", "back": user]
            let confirm = await browser.send("POST", "/admin/actions/retry-delivery", form: form)
            #expect(confirm.text.contains("id=\"confirm\""))
            #expect(try await admin.audits("webhook.retry").isEmpty, "nothing happens before the confirmation")
            let forged = await browser.send(
                "POST", "/admin/actions/retry-delivery", form: form.merging(["csrf": "x", "confirm": "yes"]) { _, b in b })
            #expect(forged.status == 403)
            let done = await browser.send("POST", "/admin/actions/retry-delivery", form: form.merging(["confirm": "yes"]) { a, _ in a })
            #expect(done.status == 200, "\(done.text)")
            #expect(done.text.contains("&quot;PENDING&quot;"), "the answer shows the delivery queued again")
            #expect(done.text.contains("href=\"/admin/case?q=%3Ci%3Eu2%3C%2Fi%3E\" id=\"back\""), "back to the case")
            #expect(try await admin.audits("webhook.retry").map { "\($0.operator) \($0.reason)" } == ["alice receiver fixed"])
            let status: String = try await admin.app.pool.query("SELECT status FROM webhook_delivery WHERE event_id = \(event)").single().decode(
                "status")
            #expect(status == "PENDING")
            let after = await browser.send("GET", "/admin/")
            #expect(
                !after.text.contains("DEAD deliveries") && !after.text.contains("id=\"dead-deliveries\""), "a retried delivery needs no attention")

            let unknown = await browser.send(
                "POST", "/admin/actions/retry-delivery", form: form.merging(["eventId": "evt_nope", "confirm": "yes"]) { _, b in b })
            #expect(unknown.status == 404 && unknown.text.contains("DELIVERY_NOT_FOUND"))
            let viewer = Browser(admin)
            #expect(try await viewer.signIn(admin.viewerToken).status == 303)
            let viewerCSRF = try #require(Browser.field("csrf", in: await viewer.send("GET", "/admin/").text))
            let refused = await viewer.send(
                "POST", "/admin/actions/retry-delivery", form: form.merging(["csrf": viewerCSRF, "confirm": "yes"]) { _, b in b })
            #expect(refused.status == 403)
            #expect(try await admin.audits("webhook.retry").count == 1)

            // A deleted endpoint's deliveries stay in the case, without a button: nothing is sent to it.
            #expect(try await admin.request("DELETE", "/admin/v1/webhooks/\(endpoint)?reason=retired", token: admin.operatorToken).status == 200)
            let later = await browser.send("GET", "/admin/case?q=\(user)")
            #expect(later.text.contains(event) && later.text.contains("endpoint deleted"))
            #expect(!later.text.contains("action=\"/admin/actions/retry-delivery\""))
        }
    }

    /// Webhook endpoints in the console: the list and one endpoint's page for any session; the
    /// registration (its secret shown once), rotation and deletion for operators, each confirmed and audited.
    @Test func webhookPagesListCreateFilterRotateAndDelete() async throws {
        try await AdminTestApp.with { admin in
            let browser = Browser(admin)
            #expect(try await browser.signIn(admin.operatorToken).status == 303)
            let empty = await browser.send("GET", "/admin/webhooks")
            #expect(empty.status == 200)
            #expect(empty.text.contains("action=\"/admin/actions/create-webhook\""))
            let csrf = try #require(Browser.field("csrf", in: empty.text))

            let form = [
                "csrf": csrf, "url": WebhookRouteTests.publicURL, "eventTypes": "entitlement.granted, order.fulfilled",
                "environments": "", "description": "<script>billing</script>",
            ]
            #expect(await browser.send("POST", "/admin/actions/create-webhook", form: form).text.contains("id=\"confirm\""))
            #expect(try await admin.app.count("SELECT count(*) FROM webhook_endpoint") == 0)
            let created = await browser.send("POST", "/admin/actions/create-webhook", form: form.merging(["confirm": "yes"]) { a, _ in a })
            #expect(created.status == 200, "\(created.text)")
            #expect(created.text.contains("id=\"secret-once\"") && created.text.contains("whsec_"))
            #expect(try await admin.audits("webhook.create").map(\.operator) == ["alice"])
            let id: String = try await admin.app.pool.query("SELECT id FROM webhook_endpoint").single().decode("id")
            let types: String = try await admin.app.pool.query(
                "SELECT array_to_string(event_types, ' ') AS t FROM webhook_endpoint"
            ).single().decode("t")
            #expect(types == "entitlement.granted order.fulfilled")
            let refusedURL = await browser.send(
                "POST", "/admin/actions/create-webhook", form: form.merging(["url": "https://127.0.0.1/x", "confirm": "yes"]) { _, b in b })
            #expect(refusedURL.status == 422 && refusedURL.text.contains("WEBHOOK_URL_REFUSED"))

            let list = await browser.send("GET", "/admin/webhooks")
            #expect(list.text.contains("href=\"/admin/webhooks/\(id)\""))
            #expect(list.text.contains("&lt;script&gt;billing&lt;/script&gt;") && !list.text.contains("<script>billing"))
            #expect(!list.text.contains("whsec_"), "the secret is never shown again")

            let store = WebhookStore(pool: admin.app.pool)
            for event in ["evt_console1", "evt_console2"] {
                #expect(try await store.enqueue(eventID: event, type: "entitlement.granted", environment: "Sandbox", payload: Array("{}".utf8)) == 1)
            }
            try await admin.app.pool.query(
                "UPDATE webhook_delivery SET status = 'DEAD', last_error = '<img src=x>' WHERE event_id = 'evt_console1'")
            let all = await browser.send("GET", "/admin/webhooks/\(id)")
            #expect(all.status == 200, "\(all.text)")
            #expect(all.text.contains("evt_console1") && all.text.contains("evt_console2"))
            #expect(all.text.contains("&lt;img src=x&gt;") && !all.text.contains("<img src=x>"))
            #expect(!all.text.contains("whsec_"))
            let dead = await browser.send("GET", "/admin/webhooks/\(id)?status=DEAD")
            #expect(dead.text.contains("evt_console1") && !dead.text.contains("evt_console2"))
            #expect(dead.text.contains("<strong><a href=\"/admin/webhooks/\(id)?status=DEAD\""), "the filter in use is marked")
            #expect(await browser.send("GET", "/admin/webhooks/\(id)?status=LOST").status == 400)
            let missing = await browser.send("GET", "/admin/webhooks/%3Cb%3E")
            #expect(missing.status == 404 && !missing.text.contains("<b>"))
            #expect(await browser.send("GET", "/admin/webhooks/wh_000000").status == 404)

            // A retry from the endpoint's page leads back to it.
            let retry = ["csrf": csrf, "id": id, "eventId": "evt_console1", "reason": "receiver fixed", "confirm": "yes"]
            let retried = await browser.send("POST", "/admin/actions/retry-delivery", form: retry)
            #expect(retried.status == 200 && retried.text.contains("href=\"/admin/webhooks/\(id)\" id=\"back\""), "\(retried.text)")

            let viewer = Browser(admin)
            #expect(try await viewer.signIn(admin.viewerToken).status == 303)
            #expect(await viewer.send("GET", "/admin/webhooks").text.contains(id), "a viewer reads")
            #expect(await viewer.send("GET", "/admin/webhooks/\(id)").status == 200)
            let viewerCSRF = try #require(Browser.field("csrf", in: await viewer.send("GET", "/admin/").text))
            let viewerCreate = await viewer.send(
                "POST", "/admin/actions/create-webhook", form: form.merging(["csrf": viewerCSRF, "confirm": "yes"]) { _, b in b })
            #expect(viewerCreate.status == 403)
            #expect(try await admin.app.count("SELECT count(*) FROM webhook_endpoint") == 1)

            let rotate = ["csrf": csrf, "id": id, "reason": "leaked", "confirm": "yes"]
            let rotated = await browser.send("POST", "/admin/actions/rotate-webhook-secret", form: rotate)
            #expect(rotated.status == 200 && rotated.text.contains("whsec_") && rotated.text.contains("id=\"secret-once\""), "\(rotated.text)")
            #expect(try await admin.audits("webhook.rotate-secret").map(\.operator) == ["alice"])
            #expect(!(await browser.send("GET", "/admin/webhooks/\(id)").text.contains("whsec_")))

            let delete = ["csrf": csrf, "id": id, "reason": "retired", "confirm": "yes"]
            let deleted = await browser.send("POST", "/admin/actions/delete-webhook", form: delete)
            #expect(deleted.status == 200, "\(deleted.text)")
            #expect(try await admin.audits("webhook.delete").map { "\($0.operator) \($0.reason)" } == ["alice retired"])
            #expect(!(await browser.send("GET", "/admin/webhooks").text.contains("href=\"/admin/webhooks/\(id)\"")))
            let gone = await browser.send("GET", "/admin/webhooks/\(id)")
            #expect(gone.status == 200 && !gone.text.contains("rotate-webhook-secret"), "a deleted endpoint is read, not acted on")
            #expect(!gone.text.contains("retry-delivery") && gone.text.contains("endpoint deleted"), "nothing is sent to it any more")
            #expect(await browser.send("POST", "/admin/actions/delete-webhook", form: delete).status == 404)
        }
    }

    @Test func aViewerReadsButCannotAct() async throws {
        try await AdminTestApp.with { admin in
            let browser = Browser(admin)
            #expect(try await browser.signIn(admin.viewerToken).status == 303)
            let home = await browser.send("GET", "/admin/")
            #expect(home.text.contains("(viewer)"))
            let csrf = try #require(Browser.field("csrf", in: home.text))
            let refused = await browser.send(
                "POST", "/admin/actions/test-user", form: ["csrf": csrf, "userId": "u1", "enabled": "true", "reason": "r", "confirm": "yes"])
            #expect(refused.status == 403)
            #expect(try await admin.audits("TEST_USER_FLAGGED").isEmpty)
        }
    }
}
