import Foundation
import HTTPServer
import Postgres
import ServiceRuntime
import Storage
import TestSupport
import Testing

@testable import IngressApp

/// A consent a parent's RESCIND_CONSENT withdrew, as the admin API, the console and the metering
/// API see it: restored by an operator only, spent nothing while withdrawn.
@Suite(.timeLimit(.minutes(3)))
struct ConsentRestoreRouteTests {
    /// u1 on pro until 2037 with 5 permanent credits and a rate `call` of one credit, rescinded an
    /// hour ago (as the worker's `UserStore.rescindConsent` leaves the row).
    static func rescindedUser(_ admin: AdminTestApp) async throws {
        try await admin.app.rows.applyDemoCatalogue()
        let expires = try #require(RFC3339.date(from: "2037-01-05T10:00:00Z"))
        try await admin.app.rows.addSubscription(user: "u1", product: "com.example.pro.yearly", status: "ACTIVE", expiresAt: expires)
        try await admin.app.pool.query(
            PostgresQuery(
                unsafeSQL: """
                    INSERT INTO credit_account (user_id, pool, balance) VALUES ('u1', 'PERMANENT', 5000000);
                    INSERT INTO credit_rate_version (code, version, micro_credits_per_unit, effective_from) VALUES ('call', 1, 1000000, 'epoch');
                    UPDATE app_user SET consent_rescinded_at = now() - interval '1 hour' WHERE user_id = 'u1';
                    """))
        try await admin.app.rows.addUser("u2")
    }

    static func activeEntitlements(_ admin: AdminTestApp, _ user: String) async throws -> [String] {
        let response = try await admin.get("/admin/v1/users/\(user)/entitlements")
        #expect(response.status == 200, "\(response.text)")
        let items = try #require(try response.json()["entitlements"] as? [[String: Any]])
        return items.filter { $0["active"] as? Bool == true }.compactMap { $0["entitlement"] as? String }.sorted()
    }

    @Test func anOperatorRestoresARescindedConsentOnceWithItsAuditRowAndEvent() async throws {
        try await AdminTestApp.with { admin in
            try await Self.rescindedUser(admin)
            #expect(try await Self.activeEntitlements(admin, "u1").isEmpty)
            let overview = try await admin.get("/admin/v1/users/u1/entitlements").json()
            #expect((overview["summary"] as? String)?.hasPrefix("no entitlement (consent rescinded on ") == true, "\(overview)")
            #expect(overview["consentRescindedAt"] is String)
            let path = "/admin/v1/users/u1/consent/restore"
            let body = ["reason": "parent confirmed consent, ticket 4411"]

            let viewer = try await admin.request("POST", path, token: admin.viewerToken, json: body)
            #expect(viewer.status == 403 && viewer.code == "FORBIDDEN", "\(viewer.text)")
            #expect(try await admin.request("POST", path, token: nil, json: body).status == 401)
            let blank = try await admin.act(path, ["reason": " "])
            #expect(blank.status == 400 && blank.code == "INVALID_REQUEST", "\(blank.text)")
            let unknown = try await admin.act("/admin/v1/users/nobody/consent/restore", body)
            #expect(unknown.status == 404 && unknown.code == "NOT_FOUND", "\(unknown.text)")
            let never = try await admin.act("/admin/v1/users/u2/consent/restore", body)
            #expect(never.status == 409 && never.code == "CONSENT_NOT_RESCINDED", "\(never.text)")
            #expect(try await admin.audits("CONSENT_RESTORED").isEmpty, "nothing refused leaves a row")
            #expect(try await Self.activeEntitlements(admin, "u1").isEmpty)

            let restored = try await admin.act(path, body)
            #expect(restored.status == 200, "\(restored.text)")
            let answer = try restored.json()
            #expect(answer["userId"] as? String == "u1")
            #expect(answer["entitlements"] as? [String] == ["pro"])
            #expect(answer["rescindedAt"] is String && answer["restoredAt"] is String)
            #expect(try await Self.activeEntitlements(admin, "u1") == ["pro"])
            let restoredOverview = try await admin.get("/admin/v1/users/u1/entitlements").json()
            #expect(restoredOverview["summary"] as? String == "pro until 2037-01-05, renews" && restoredOverview["consentRescindedAt"] == nil)
            #expect(try await admin.audits("CONSENT_RESTORED").map(\.operator) == ["alice"])
            let states = try #require(
                try await admin.app.pool.query(
                    "SELECT before::text AS b, after::text AS a FROM audit_log WHERE action = 'CONSENT_RESTORED'"
                ).first)
            let before = try JSONSerialization.jsonObject(with: Data(try states.decode("b", as: String.self).utf8)) as? [String: Any]
            let after = try JSONSerialization.jsonObject(with: Data(try states.decode("a", as: String.self).utf8)) as? [String: Any]
            #expect(before?["consentRescindedAt"] is String && before?["activeEntitlements"] as? [String] == [])
            #expect(after?["consentRescindedAt"] is NSNull && after?["activeEntitlements"] as? [String] == ["pro"])
            let event = try #require(
                try await admin.app.pool.query(
                    "SELECT type, user_id, data::text AS data FROM outbound_event WHERE type = 'account.consent_restored'"
                ).first)
            #expect(try event.decode("user_id", as: String.self) == "u1")
            let data = try JSONSerialization.jsonObject(with: Data(try event.decode("data", as: String.self).utf8)) as? [String: Any]
            #expect(data?["entitlements"] as? [String] == ["pro"])
            #expect(data?["operator"] as? String == "alice" && data?["reason"] as? String == body["reason"])

            let again = try await admin.act(path, body)
            #expect(again.status == 409 && again.code == "CONSENT_NOT_RESCINDED", "\(again.text)")
            #expect(try await admin.audits("CONSENT_RESTORED").count == 1)
        }
    }

    /// Spending credits is using the app: refused while the consent is withdrawn (the balance
    /// stays), spent again once restored.
    @Test func noCreditIsSpentWhileTheConsentIsRescinded() async throws {
        try await AdminTestApp.with { admin in
            try await Self.rescindedUser(admin)
            let app = admin.app
            let call: [String: Any] = ["idempotencyKey": "k1", "userId": "u1", "units": 1, "rate": "call"]
            let refused = try await app.post("/api/v1/credits/usage", json: call, headers: app.serviceAuthorization)
            #expect(refused.status == 403 && refused.code == "CONSENT_RESCINDED", "\(refused.text)")
            let check = await app.get("/api/v1/credits/check?userId=u1&units=1&rate=call", headers: app.serviceAuthorization)
            #expect(check.status == 403 && check.code == "CONSENT_RESCINDED", "\(check.text)")
            #expect(try await app.count("SELECT count(*) FROM credit_usage_event") == 0)
            #expect(try await app.count("SELECT (balance / 1000000)::int FROM credit_account WHERE user_id = 'u1'") == 5)

            #expect(try await admin.act("/admin/v1/users/u1/consent/restore", ["reason": "wrong account"]).status == 200)
            let charged = try await app.post("/api/v1/credits/usage", json: call, headers: app.serviceAuthorization)
            #expect(charged.status == 200, "\(charged.text)")
            #expect(try await app.count("SELECT (balance / 1000000)::int FROM credit_account WHERE user_id = 'u1'") == 4)
        }
    }

    /// The case says the consent is rescinded and since when, and offers the restore behind a
    /// confirmation and the session's CSRF token.
    @Test func theCaseShowsTheRescissionAndRestoresAfterAConfirmation() async throws {
        try await AdminTestApp.with { admin in
            try await Self.rescindedUser(admin)
            let browser = ConsoleRouteTests.Browser(admin)
            #expect(try await browser.signIn(admin.operatorToken).status == 303)
            let page = await browser.send("GET", "/admin/case?q=u1")
            #expect(page.status == 200, "\(page.text)")
            #expect(page.text.contains("id=\"consent-rescinded\">Consent rescinded (RESCIND_CONSENT) at "), "\(page.text)")
            #expect(page.text.contains("action=\"/admin/actions/restore-consent\""))
            let csrf = try #require(ConsoleRouteTests.Browser.field("csrf", in: page.text))
            let form = ["csrf": csrf, "userId": "u1", "reason": "parent consented again", "back": "u1"]
            #expect(await browser.send("POST", "/admin/actions/restore-consent", form: form).text.contains("id=\"confirm\""))
            #expect(try await admin.audits("CONSENT_RESTORED").isEmpty, "nothing happens before the confirmation")
            let forged = await browser.send(
                "POST", "/admin/actions/restore-consent", form: form.merging(["csrf": "guess", "confirm": "yes"]) { _, b in b })
            #expect(forged.status == 403, "\(forged.text)")
            let done = await browser.send("POST", "/admin/actions/restore-consent", form: form.merging(["confirm": "yes"]) { a, _ in a })
            #expect(done.status == 200, "\(done.text)")
            #expect(try await admin.audits("CONSENT_RESTORED").map(\.operator) == ["alice"])
            let after = await browser.send("GET", "/admin/case?q=u1")
            #expect(!after.text.contains("consent-rescinded") && !after.text.contains("/admin/actions/restore-consent"), "\(after.text)")
        }
    }
}
