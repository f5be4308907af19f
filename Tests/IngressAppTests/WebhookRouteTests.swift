import Foundation
import HTTPServer
import Postgres
import Storage
import TestSupport
import Testing

@testable import IngressApp

/// `/admin/v1/webhooks` through the admin router: registration and its URL checks, reading,
/// rotation, the deliveries' list with its cursor, a manual retry, deletion, roles and audit rows.
@Suite struct WebhookRouteTests {
    static let publicURL = "https://93.184.216.34/hooks/subscriptions"

    @Test func registersShowsRotatesAndDeletesAnEndpoint() async throws {
        try await AdminTestApp.with { admin in
            let created = try await admin.act(
                "/admin/v1/webhooks",
                ["url": Self.publicURL, "eventTypes": ["entitlement.granted", "order.fulfilled"], "description": "billing"])
            #expect(created.status == 201, "\(created.text)")
            let body = try created.json()
            let id = try #require(body["id"] as? String)
            #expect(id.hasPrefix("wh_"))
            let secret = try #require(body["secret"] as? String)
            #expect(secret.hasPrefix("whsec_") && Data(base64Encoded: String(secret.dropFirst(6)))?.count == 32)
            #expect(body["eventTypes"] as? [String] == ["entitlement.granted", "order.fulfilled"])

            // The secret is shown once: never by a read, never in the audit trail or the table.
            let shown = try await admin.get("/admin/v1/webhooks/\(id)")
            #expect(shown.status == 200)
            #expect(try shown.json()["secret"] == nil)
            #expect(!shown.text.contains(secret))
            let list = try await admin.get("/admin/v1/webhooks")
            #expect((try list.json()["items"] as? [[String: Any]])?.map { $0["id"] as? String } == [id])
            #expect(try await admin.app.count("SELECT count(*) FROM audit_log WHERE action = 'webhook.create' AND operator = 'alice'") == 1)
            #expect(try await admin.app.count("SELECT count(*) FROM audit_log WHERE after::text LIKE '%whsec_%'") == 0)
            let suffix = String(secret.dropFirst(6))
            #expect(
                try await admin.app.pool.query(
                    "SELECT count(*) FROM webhook_endpoint WHERE position(\(Array(suffix.utf8)) in secret_sealed) > 0"
                )[0].decode(0, as: Int.self) == 0)

            // Rotation: a new secret, the old one signing until the overlap ends (24 h by default).
            #expect(try await admin.act("/admin/v1/webhooks/\(id)/rotate-secret", [:]).status == 400)
            let rotated = try await admin.act("/admin/v1/webhooks/\(id)/rotate-secret", ["reason": "leaked in a log"])
            #expect(rotated.status == 200, "\(rotated.text)")
            let newSecret = try #require(try rotated.json()["secret"] as? String)
            #expect(newSecret.hasPrefix("whsec_") && newSecret != secret)
            let overlap = try #require(try await admin.get("/admin/v1/webhooks/\(id)").json()["previousSecretExpiresAt"] as? String)
            let until = try #require(ISO8601DateFormatter.withFractions.date(from: overlap) ?? ISO8601DateFormatter().date(from: overlap))
            #expect(abs(until.timeIntervalSinceNow - 24 * 3600) < 600)

            // Deleted: still readable with its deletion time, gone from the list, not deletable twice.
            let deleted = try await admin.request("DELETE", "/admin/v1/webhooks/\(id)?reason=retired", token: admin.operatorToken)
            #expect(deleted.status == 200, "\(deleted.text)")
            #expect(try deleted.json()["deletedAt"] is String)
            #expect((try await admin.get("/admin/v1/webhooks").json()["items"] as? [Any])?.isEmpty == true)
            #expect(try await admin.request("DELETE", "/admin/v1/webhooks/\(id)", token: admin.operatorToken).status == 404)
            #expect(try await admin.app.count("SELECT count(*) FROM audit_log WHERE action LIKE 'webhook.%'") == 3)
        }
    }

    @Test(arguments: [
        "http://93.184.216.34/hook", "https://127.0.0.1/hook", "https://10.0.0.8/", "https://172.16.5.4/", "https://192.168.0.10/",
        "https://169.254.169.254/latest/meta-data/", "https://[::1]/", "https://[fd00::1]/", "https://[fe80::1]/",
        "https://[::ffff:127.0.0.1]/", "https://localhost/hook",
    ])
    func refusesURLsOutsideThePolicy(url: String) async throws {
        try await AdminTestApp.with { admin in
            let refused = try await admin.act("/admin/v1/webhooks", ["url": url])
            #expect(refused.status == 422, "\(url): \(refused.text)")
            #expect(try refused.json()["code"] as? String == "WEBHOOK_URL_REFUSED")
            #expect(try await admin.app.count("SELECT count(*) FROM webhook_endpoint") == 0)
        }
    }

    @Test func theSwitchesOpenHTTPAndPrivateNetworks() async throws {
        try await AdminTestApp.with(extra: ["WEBHOOK_ALLOW_HTTP": "true", "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true"]) { admin in
            let created = try await admin.act("/admin/v1/webhooks", ["url": "http://127.0.0.1:9000/hook"])
            #expect(created.status == 201, "\(created.text)")
        }
    }

    @Test func validatesTheBodyAndTheRoles() async throws {
        try await AdminTestApp.with { admin in
            for bad: [String: Any] in [
                [:], ["url": Self.publicURL, "eventTypes": ["no.such.type"]], ["url": Self.publicURL, "eventTypes": []],
                ["url": Self.publicURL, "environments": ["Staging"]], ["url": "not a url"],
            ] {
                let answer = try await admin.act("/admin/v1/webhooks", bad)
                #expect([400, 422].contains(answer.status), "\(bad): \(answer.text)")
            }
            // A viewer reads but does not register.
            let viewer = try await admin.request("POST", "/admin/v1/webhooks", token: admin.viewerToken, json: ["url": Self.publicURL])
            #expect(viewer.status == 403)
            #expect(try await admin.get("/admin/v1/webhooks").status == 200)
            #expect(try await admin.request("GET", "/admin/v1/webhooks", token: nil).status == 401)
            let missing = try await admin.get("/admin/v1/webhooks/wh_000000")
            #expect(missing.status == 404)
            #expect(try missing.json()["code"] as? String == "WEBHOOK_NOT_FOUND")
        }
    }

    @Test func listsDeliveriesByPageAndRetriesOne() async throws {
        try await AdminTestApp.with { admin in
            let id = try #require(try await admin.act("/admin/v1/webhooks", ["url": Self.publicURL]).json()["id"] as? String)
            let store = WebhookStore(pool: admin.app.pool)
            var events: [String] = []
            for index in 0..<5 {
                let event = "evt_route\(index)"
                events.append(event)
                #expect(try await store.enqueue(eventID: event, type: "entitlement.granted", environment: "Sandbox", payload: Array("{}".utf8)) == 1)
            }
            try await admin.app.pool.query(
                "UPDATE webhook_delivery SET status = 'DEAD', attempts = 12, last_status_code = 500, last_error = 'the endpoint answered 500' WHERE event_id = 'evt_route1'"
            )

            let first = try await admin.get("/admin/v1/webhooks/\(id)/deliveries?limit=2")
            #expect(first.status == 200, "\(first.text)")
            let firstItems = try #require(try first.json()["items"] as? [[String: Any]])
            #expect(firstItems.map { $0["eventId"] as? String } == ["evt_route4", "evt_route3"])
            #expect(firstItems[0]["status"] as? String == "PENDING" && firstItems[0]["lastStatusCode"] is NSNull)
            let cursor = try #require(try first.json()["nextCursor"] as? String)
            let second = try await admin.get("/admin/v1/webhooks/\(id)/deliveries?limit=2&cursor=\(cursor)")
            #expect((try second.json()["items"] as? [[String: Any]])?.map { $0["eventId"] as? String } == ["evt_route2", "evt_route1"])
            // A cursor of another filter is refused.
            let crossed = try await admin.get("/admin/v1/webhooks/\(id)/deliveries?status=DEAD&cursor=\(cursor)")
            #expect(crossed.status == 400)
            #expect(try crossed.json()["code"] as? String == "INVALID_CURSOR")

            let dead = try await admin.get("/admin/v1/webhooks/\(id)/deliveries?status=DEAD")
            let deadItems = try #require(try dead.json()["items"] as? [[String: Any]])
            #expect(deadItems.count == 1)
            #expect(deadItems.first?["attempts"] as? Int == 12 && deadItems.first?["lastStatusCode"] as? Int == 500)
            #expect(try await admin.get("/admin/v1/webhooks/\(id)/deliveries?status=LOST").status == 400)

            let retried = try await admin.act("/admin/v1/webhooks/\(id)/deliveries/evt_route1/retry", ["reason": "receiver fixed"])
            #expect(retried.status == 200, "\(retried.text)")
            #expect(try retried.json()["status"] as? String == "PENDING")
            #expect(try retried.json()["eventId"] as? String == "evt_route1")
            #expect(try await admin.app.count("SELECT count(*) FROM audit_log WHERE action = 'webhook.retry' AND reason = 'receiver fixed'") == 1)
            let unknown = try await admin.act("/admin/v1/webhooks/\(id)/deliveries/evt_nope/retry", ["reason": "x"])
            #expect(unknown.status == 404)
            #expect(try unknown.json()["code"] as? String == "DELIVERY_NOT_FOUND")
        }
    }

    /// The forwarding targets of Apple's notifications: written from the settings (audited once per
    /// change), left out of the webhooks' list and of the outbound events, given the notifications
    /// of their environments, and seen and retried through the deliveries' routes.
    @Test func forwardTargetsTakeNotificationsAndShowTheirDeliveries() async throws {
        try await AdminTestApp.with { admin in
            let store = WebhookStore(pool: admin.app.pool)
            let production = "wh_af0000000000000000000001"
            let sandbox = "wh_af0000000000000000000002"
            let secret = WebhookStore.SealedSecret(keyID: "k1", sealed: Array(repeating: 7, count: 60))
            let both = [
                (id: production, url: "https://93.184.216.34/apple", environments: Optional(["Production"]), secret: secret),
                (id: sandbox, url: "https://93.184.216.34/apple-sandbox", environments: Optional(["Sandbox", "Xcode"]), secret: secret),
            ]
            try await store.configureForwards(both, operator: "configuration")
            // The same settings at the next start write nothing.
            try await store.configureForwards(both, operator: "configuration")
            #expect(try await admin.app.count("SELECT count(*) FROM audit_log WHERE action = 'apple-forward.configure'") == 2)
            #expect((try await admin.get("/admin/v1/webhooks").json()["items"] as? [Any])?.isEmpty == true)

            // An outbound event is no notification: no forward target takes it.
            #expect(try await store.enqueue(eventID: "evt_f1", type: "entitlement.granted", environment: "Sandbox", payload: [1]) == 0)
            let body = Array(#"{"signedPayload":"a.b.c"}"#.utf8)
            let notification = WebhookStore.IncomingEvent(id: "uuid-sandbox", type: "TEST", environment: "Sandbox", payload: body)
            #expect(try await store.enqueue([notification], kind: .appleForward) == 1)
            #expect(try await store.enqueue([notification], kind: .appleForward) == 0)
            let listed = try await admin.get("/admin/v1/webhooks/\(sandbox)/deliveries")
            #expect(listed.status == 200, "\(listed.text)")
            #expect((try listed.json()["items"] as? [[String: Any]])?.map { $0["eventId"] as? String } == ["uuid-sandbox"])
            #expect((try await admin.get("/admin/v1/webhooks/\(production)/deliveries").json()["items"] as? [Any])?.isEmpty == true)
            let retried = try await admin.act("/admin/v1/webhooks/\(sandbox)/deliveries/uuid-sandbox/retry", ["reason": "receiver fixed"])
            #expect(retried.status == 200, "\(retried.text)")

            // One URL for both environments: the Sandbox target is deleted (its history stays), and
            // the remaining one takes Sandbox's notifications.
            try await store.configureForwards(
                [(id: production, url: "https://93.184.216.34/apple", environments: nil, secret: secret)], operator: "configuration")
            #expect(try await store.endpoint(sandbox)?.deletedAt != nil)
            #expect(try await store.endpoint(production)?.environments == nil)
            #expect(try await admin.app.count("SELECT count(*) FROM audit_log WHERE action = 'apple-forward.remove'") == 1)
            let later = WebhookStore.IncomingEvent(id: "uuid-later", type: "TEST", environment: "Sandbox", payload: body)
            #expect(try await store.enqueue([later], kind: .appleForward) == 1)
            #expect(try await store.deliveries(endpointID: production, status: nil, beforeSeq: nil, limit: 10).map(\.eventId) == ["uuid-later"])
        }
    }
}

extension ISO8601DateFormatter {
    static var withFractions: ISO8601DateFormatter {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter
    }
}
