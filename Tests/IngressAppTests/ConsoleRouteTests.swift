import Foundation
import HTTPServer
import ServiceRuntime
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

        init(_ admin: AdminTestApp) { self.admin = admin }

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
            #expect(browser.cookies[ConsoleSession.cookie] == nil)
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
            #expect(!(signed.response.headers.first { $0.1.hasPrefix("admin_session=") }?.1.contains("Secure") ?? true))
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
            #expect(browser.cookies[ConsoleSession.cookie] == nil)
            #expect(await browser.send("GET", "/admin/queue").status == 303)
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
