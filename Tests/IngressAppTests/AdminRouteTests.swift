import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import HTTPServer
import Postgres
import ServiceRuntime
import TestSupport
import Testing

@testable import IngressApp

/// The admin router beside an ingress test app on the same database, called in process with an
/// operator and a viewer token.
struct AdminTestApp: Sendable {
    let app: IngressTestApp
    let router: Router<AdminRequestContext>
    let operatorToken: String
    let viewerToken: String

    static func with<R>(extra: [String: String] = [:], _ body: (AdminTestApp) async throws -> R) async throws -> R {
        let operatorToken = Base64URL.encode(SecureRandom.bytes(32))
        let viewerToken = Base64URL.encode(SecureRandom.bytes(32))
        let tokens = "alice:operator:\(operatorToken),bob:viewer:\(viewerToken)"
        return try await IngressTestApp.with(extra: extra.merging(["ADMIN_TOKENS": tokens]) { _, new in new }) { app in
            try await body(
                AdminTestApp(app: app, router: try router(app), operatorToken: operatorToken, viewerToken: viewerToken))
        }
    }

    /// The admin router of an ingress on `app`'s database and settings, `extra` over them, with
    /// `clock` as its clock; `logs` receives what its requests log.
    static func router(
        _ app: IngressTestApp, extra: [String: String] = [:], clock: any WallClock = SystemClock(), logs: LogSink? = nil
    ) throws -> Router<AdminRequestContext> {
        let configuration = try IngressConfiguration.load(environment: app.environment.merging(extra) { _, new in new })
        let context = try IngressContext(
            configuration: configuration, pool: app.pool, publisher: OutboxOnly(), readiness: app.readiness, clock: clock,
            logger: Logger(label: "admin", level: .warning, sink: LogSink.memory()))
        var router = try buildAdminRouter(context)
        if let logs { router.logger = Logger(label: "admin", level: .info, sink: logs) }
        return router
    }

    /// This app as another ingress on the same database serves it: `extra` over its settings,
    /// `clock` as its clock (a restart with a changed configuration, or a moved clock).
    func restarted(extra: [String: String] = [:], clock: any WallClock = SystemClock(), logs: LogSink? = nil) throws -> AdminTestApp {
        AdminTestApp(
            app: app, router: try Self.router(app, extra: extra, clock: clock, logs: logs), operatorToken: operatorToken,
            viewerToken: viewerToken)
    }

    /// `token` nil: no Authorization header.
    func request(_ method: String, _ target: String, token: String?, json: Any? = nil) async throws -> TestResponse {
        let (path, query) = IngressTestApp.split(target)
        var headers: [String: String] = ["x-request-id": "admin-test"]
        if let token { headers["authorization"] = "Bearer \(token)" }
        if json != nil { headers["content-type"] = "application/json" }
        let body = try json.map { Array(try JSONSerialization.data(withJSONObject: $0)) } ?? []
        let head = HTTPRequestHead(method: method, path: path, query: query, headers: headers, traceID: "admin-test")
        return TestResponse(await router.handle(HTTPRequest(head: head, body: body)))
    }

    func get(_ target: String) async throws -> TestResponse { try await request("GET", target, token: viewerToken) }

    func act(_ target: String, _ json: [String: Any]) async throws -> TestResponse {
        try await request("POST", target, token: operatorToken, json: json)
    }

    /// Stores a signed Sandbox notification through the public route; returns its UUID.
    @discardableResult
    func notify(transactionID: String, originalTransactionID: String, token: UUID? = nil) async throws -> String {
        let transaction = TestPayloads.transaction(
            bundleId: IngressTestApp.bundleID, environment: .sandbox, transactionId: transactionID,
            originalTransactionId: originalTransactionID, appAccountToken: token)
        let uuid = UUID()
        let jws = try app.signer.signNotification(
            type: .didRenew, bundleId: IngressTestApp.bundleID, environment: .sandbox, transaction: transaction,
            notificationUUID: uuid)
        let response = try await app.post("/api/v1/iap/apple/notifications/sandbox", json: ["signedPayload": jws])
        #expect(response.status == 200, "\(response.text)")
        return uuid.uuidString.lowercased()
    }

    /// The stored event of a notification, put DEAD with `code` as a worker would have.
    func bury(_ uuid: String, code: String) async throws -> Int64 {
        try await app.pool.query(
            """
            UPDATE inbound_event SET process_status = 'DEAD', error_code = \(code), error_message = 'test', retry_count = 8
             WHERE notification_uuid = \(uuid) RETURNING id
            """
        ).first!.decode("id")
    }

    func audits(_ action: String) async throws -> [(operator: String, reason: String)] {
        try await app.pool.query("SELECT operator, reason FROM audit_log WHERE action = \(action) ORDER BY id").map {
            (try $0.decode("operator"), try $0.decode("reason"))
        }
    }
}

@Suite(.timeLimit(.minutes(3)))
struct AdminRouteTests {
    @Test func settingsAreValidatedAndTheListenerIsOffWithoutTokens() async throws {
        let base = ["DATABASE_URL": "postgresql://x", "KAFKA_BROKERS": "127.0.0.1:9"]
        func admin(_ extra: [String: String]) -> AdminSettings {
            let reader = ConfigurationReader(environment: base.merging(extra) { _, new in new })
            return AdminSettings(reader: reader)
        }
        func problems(_ extra: [String: String]) -> [String] {
            let reader = ConfigurationReader(environment: base.merging(extra) { _, new in new })
            _ = AdminSettings(reader: reader)
            return reader.problems.map(\.name)
        }
        let off = admin([:])
        #expect(!off.isEnabled)
        #expect(off.host == "127.0.0.1" && off.port == 8082)
        let token = String(repeating: "t", count: 32)
        let on = admin(["ADMIN_TOKENS": "alice:operator:\(token),bob:viewer:\(token)x", "ADMIN_HTTP_PORT": "9999"])
        #expect(on.credentials.map(\.name) == ["alice", "bob"])
        #expect(on.credentials.map(\.role) == [.operator, .viewer])
        #expect(on.port == 9999)
        #expect(problems(["ADMIN_TOKENS": "alice:operator:short"]) == ["ADMIN_TOKENS"])
        #expect(problems(["ADMIN_TOKENS": "alice:admin:\(token)"]) == ["ADMIN_TOKENS"])
        #expect(problems(["ADMIN_TOKENS": "alice:viewer:\(token),alice:operator:\(token)y"]) == ["ADMIN_TOKENS"])
        #expect(problems(["ADMIN_TOKENS": "\(token)"]) == ["ADMIN_TOKENS"])
        #expect(problems(["ADMIN_HTTP_PORT": "70000"]) == ["ADMIN_HTTP_PORT"])
        let clash = ConfigurationReader(
            environment: base.merging(["ADMIN_TOKENS": "alice:operator:\(token)", "ADMIN_HTTP_PORT": "8080"]) { _, new in new })
        _ = IngressConfiguration(reader: clash)
        #expect(clash.problems.map(\.name).contains("ADMIN_HTTP_PORT"))
    }

    @Test func thePublicRouterHasNoAdminRoutes() async throws {
        try await AdminTestApp.with { admin in
            for path in ["/admin", "/admin/", "/admin/v1/lookup?q=x", "/admin/v1/events", "/admin/openapi.json"] {
                let response = await admin.app.get(path, headers: ["Authorization": "Bearer \(admin.operatorToken)"])
                #expect(response.status == 404, "\(path): \(response.text)")
            }
        }
    }

    @Test func theRegisteredRoutesAreTheDocumentedOnes() async throws {
        try await AdminTestApp.with { admin in
            let response = await admin.router.handle(HTTPRequest(head: HTTPRequestHead(method: "GET", path: "/admin/openapi.json")))
            #expect(response.status == 200)
            let document = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any] ?? [:]
            let paths = document["paths"] as? [String: [String: Any]] ?? [:]
            let documented = Set(paths.flatMap { path, operations in operations.keys.map { "\($0.uppercased()) \(path)" } })
            let registered = Set(
                admin.router.registeredRoutes.filter { $0.pattern.hasPrefix("/admin/v1/") }.map { "\($0.method) \($0.pattern)" })
            #expect(registered == documented)
            #expect(registered.count == 24)
        }
    }

    @Test func readsNeedATokenAndActionsTheOperatorRole() async throws {
        try await AdminTestApp.with { admin in
            for token in [nil, "", "nope", admin.operatorToken + "x", String(admin.operatorToken.dropLast())] {
                let response = try await admin.request("GET", "/admin/v1/events", token: token)
                #expect(response.status == 401, "\(String(describing: token)): \(response.text)")
                #expect(response.code == "UNAUTHORIZED")
            }
            let basic = await admin.router.handle(
                HTTPRequest(head: HTTPRequestHead(method: "GET", path: "/admin/v1/events", headers: ["authorization": "Basic eDp5"])))
            #expect(basic.status == 401)
            #expect(try await admin.get("/admin/v1/events").status == 200)
            #expect(try await admin.request("GET", "/admin/v1/events/summary", token: admin.operatorToken).status == 200)
            let actions: [(String, [String: Any])] = [
                ("/admin/v1/events/1/replay", ["reason": "r"]), ("/admin/v1/events/replay", ["errorCode": "X", "reason": "r"]),
                ("/admin/v1/chains/1000/requery", ["reason": "r"]), ("/admin/v1/chains/1000/attribute", ["userId": "u", "reason": "r"]),
                ("/admin/v1/chains/1000/unfreeze", ["ownerUserId": "u", "reason": "r"]),
                ("/admin/v1/users/u/credits/adjustments", ["pool": "PERMANENT", "amount": 1, "number": "n", "reason": "r"]),
                ("/admin/v1/users/u/test-user", ["enabled": true, "reason": "r"]), ("/admin/v1/users/u/consent/restore", ["reason": "r"]),
                ("/admin/v1/recoveries", ["from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z", "environment": "Sandbox", "reason": "r"]),
            ]
            for (path, body) in actions {
                let viewer = try await admin.request("POST", path, token: admin.viewerToken, json: body)
                #expect(viewer.status == 403, "\(path): \(viewer.text)")
                #expect(viewer.code == "FORBIDDEN")
                let anonymous = try await admin.request("POST", path, token: nil, json: body)
                #expect(anonymous.status == 401, "\(path)")
                var unexplained = body
                unexplained["reason"] = "  "
                let noReason = try await admin.act(path, unexplained)
                #expect(noReason.status == 400, "\(path): \(noReason.text)")
            }
            #expect(try await admin.audits("TEST_USER_FLAGGED").isEmpty)
        }
    }

    @Test func lookupResolvesEveryKindOfIDToTheSameCase() async throws {
        try await AdminTestApp.with { admin in
            try await admin.app.rows.applyDemoCatalogue()
            let user = "user-<script>alert(1)</script>"
            let order = try await admin.app.createOrder(user)
            #expect(order.status == 201 || order.status == 200, "\(order.text)")
            let orderNo = try #require(try order.json()["orderNo"] as? String)
            let accountToken = try #require(try order.json()["appAccountToken"] as? String)
            let original = String(UInt64.random(in: 1_000_000_000...9_999_999_999))
            let transaction = String(UInt64.random(in: 2_000_000_000...2_999_999_999))
            try await admin.app.rows.addSubscription(
                user: user, product: IngressTestApp.monthly, status: "ACTIVE", expiresAt: wholeSeconds(86_400),
                originalTransactionID: original)
            let uuid = try await admin.notify(transactionID: transaction, originalTransactionID: original)
            let queries: [(String, String)] = [
                ("userId", user), ("orderNo", orderNo), ("transactionId", transaction), ("originalTransactionId", original),
                ("notificationUUID", uuid), ("appAccountToken", accountToken),
            ]
            for (kind, id) in queries {
                let encoded = id.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
                let response = try await admin.get("/admin/v1/lookup?q=\(encoded)")
                #expect(response.status == 200, "\(kind): \(response.text)")
                let body = try response.json()
                let matches = body["matches"] as? [[String: Any]] ?? []
                #expect(matches.contains { $0["kind"] as? String == kind && $0["id"] as? String == id }, "\(kind): \(matches)")
                let found = body["case"] as? [String: Any] ?? [:]
                #expect((found["user"] as? [String: Any])?["userId"] as? String == user, "\(kind)")
                #expect((found["user"] as? [String: Any])?["appAccountTokens"] as? [String] == [accountToken])
                let chains = found["chains"] as? [[String: Any]] ?? []
                #expect(chains.map { $0["originalTransactionId"] as? String } == [original], "\(kind)")
                #expect(chains.first?["status"] as? String == "ACTIVE")
                let orders = found["orders"] as? [[String: Any]] ?? []
                #expect(orders.map { $0["orderNo"] as? String } == [orderNo], "\(kind)")
                let events = found["events"] as? [[String: Any]] ?? []
                #expect(events.map { $0["notificationUUID"] as? String } == [uuid], "\(kind)")
                #expect(events.first?["status"] as? String == "RECEIVED")
                #expect(events.first?["eventId"] is Int)
                let timeline = found["timeline"] as? [[String: Any]] ?? []
                let times = timeline.compactMap { ($0["at"] as? String).flatMap(RFC3339.date(from:)) }
                #expect(times.count == timeline.count && !timeline.isEmpty)
                #expect(times == times.sorted(), "oldest first")
                #expect(Set(timeline.compactMap { $0["kind"] as? String }).isSuperset(of: ["user", "order", "event"]))
                for item in timeline { #expect(Set(item.keys) == ["at", "kind", "id", "summary"]) }
            }
            let missing = try await admin.get("/admin/v1/lookup?q=no-such-id")
            #expect(missing.status == 404)
            #expect(missing.code == "NOT_FOUND")
            #expect(try await admin.get("/admin/v1/lookup").status == 400)
        }
    }

    @Test func lookupOfAnUnattributedChainShowsTheChain() async throws {
        try await AdminTestApp.with { admin in
            let original = String(UInt64.random(in: 1_000_000_000...9_999_999_999))
            try await admin.notify(transactionID: original, originalTransactionID: original)
            let response = try await admin.get("/admin/v1/lookup?q=\(original)")
            #expect(response.status == 200, "\(response.text)")
            let body = try response.json()
            let kinds = (body["matches"] as? [[String: Any]] ?? []).compactMap { $0["kind"] as? String }
            #expect(kinds == ["transactionId", "originalTransactionId"])
            let found = body["case"] as? [String: Any] ?? [:]
            #expect(found["user"] == nil, "absent: no user owns it")
            let chains = found["chains"] as? [[String: Any]] ?? []
            #expect(chains.count == 1)
            #expect(chains.first?["status"] == nil)
            #expect(chains.first?["originalTransactionId"] as? String == original)
            #expect((found["events"] as? [Any])?.count == 1)
        }
    }

    @Test func theQueuePagesWithSignedCursorsAndCountsByCode() async throws {
        try await AdminTestApp.with { admin in
            var uuids: [String] = []
            for _ in 0..<3 {
                let id = String(UInt64.random(in: 1_000_000_000...9_999_999_999))
                uuids.append(try await admin.notify(transactionID: id, originalTransactionID: id))
            }
            let dead = try await admin.bury(uuids[0], code: "UNMATCHED_PRODUCT")
            let deadOnly = try await admin.get("/admin/v1/events?status=DEAD")
            let deadItems = try deadOnly.json()["items"] as? [[String: Any]] ?? []
            #expect(deadItems.map { ($0["eventId"] as? Int).map(Int64.init) } == [dead])
            #expect(deadItems.first?["errorCode"] as? String == "UNMATCHED_PRODUCT")
            #expect(deadItems.first?["attempts"] as? Int == 8)
            let byCode = try await admin.get("/admin/v1/events?errorCode=UNMATCHED_PRODUCT").json()["items"] as? [Any]
            #expect(byCode?.count == 1)
            let first = try await admin.get("/admin/v1/events?limit=2").json()
            #expect((first["items"] as? [Any])?.count == 2)
            let cursor = try #require(first["nextCursor"] as? String)
            let second = try await admin.get("/admin/v1/events?limit=2&cursor=\(cursor)").json()
            #expect((second["items"] as? [Any])?.count == 1)
            #expect(second["nextCursor"] is NSNull)
            let all = Set(
                ((first["items"] as? [[String: Any]] ?? []) + (second["items"] as? [[String: Any]] ?? [])).compactMap {
                    $0["notificationUUID"] as? String
                })
            #expect(all == Set(uuids))
            let otherFilter = try await admin.get("/admin/v1/events?status=DEAD&limit=2&cursor=\(cursor)")
            #expect(otherFilter.status == 400)
            #expect(otherFilter.code == "INVALID_CURSOR")
            #expect(try await admin.get("/admin/v1/events?status=LOST").status == 400)
            #expect(try await admin.get("/admin/v1/events?errorCode=bad%20code").status == 400)
            let summary = try await admin.get("/admin/v1/events/summary").json()["items"] as? [[String: Any]] ?? []
            let counts = Dictionary(
                uniqueKeysWithValues: summary.map { ("\($0["status"] as? String ?? "")/\($0["errorCode"] as? String ?? "-")", $0["count"] as? Int) })
            #expect(counts == ["RECEIVED/-": 2, "DEAD/UNMATCHED_PRODUCT": 1])
            #expect(summary.allSatisfy { ($0["oldestAgeSeconds"] as? Int ?? -1) >= 0 })
        }
    }

    @Test func replayingOneEventNeedsItDeadAndLeavesAnAuditRow() async throws {
        try await AdminTestApp.with { admin in
            let id = String(UInt64.random(in: 1_000_000_000...9_999_999_999))
            let uuid = try await admin.notify(transactionID: id, originalTransactionID: id)
            let eventID = try await admin.bury(uuid, code: "UNMATCHED_PRODUCT")
            let replayed = try await admin.act("/admin/v1/events/\(eventID)/replay", ["reason": "product added"])
            #expect(replayed.status == 200, "\(replayed.text)")
            #expect(try replayed.json()["status"] as? String == "RECEIVED")
            #expect(try replayed.json()["errorCode"] == nil)
            #expect(try replayed.json()["attempts"] as? Int == 0)
            #expect(try await admin.audits("DEAD_EVENT_REPLAYED").map(\.operator) == ["alice"])
            #expect(try await admin.audits("DEAD_EVENT_REPLAYED").map(\.reason) == ["product added"])
            let again = try await admin.act("/admin/v1/events/\(eventID)/replay", ["reason": "again"])
            #expect(again.status == 409)
            #expect(again.code == "EVENT_NOT_REPLAYABLE")
            try await admin.app.pool.query("UPDATE inbound_event SET process_status = 'SUCCEEDED' WHERE id = \(eventID)")
            #expect(try await admin.act("/admin/v1/events/\(eventID)/replay", ["reason": "r"]).code == "EVENT_NOT_REPLAYABLE")
            let missing = try await admin.act("/admin/v1/events/999999/replay", ["reason": "r"])
            #expect(missing.status == 404)
            #expect(try await admin.act("/admin/v1/events/abc/replay", ["reason": "r"]).status == 400)
            #expect(try await admin.audits("DEAD_EVENT_REPLAYED").count == 1)
        }
    }

    @Test func theActionsRunTheirStoresAndAnswerTheStateTheyLeft() async throws {
        try await AdminTestApp.with { admin in
            // Replay by code.
            let id = String(UInt64.random(in: 1_000_000_000...9_999_999_999))
            let uuid = try await admin.notify(transactionID: id, originalTransactionID: id)
            _ = try await admin.bury(uuid, code: "UNMATCHED_PRODUCT")
            let byCode = try await admin.act("/admin/v1/events/replay", ["errorCode": "UNMATCHED_PRODUCT", "reason": "added"])
            #expect(byCode.status == 200, "\(byCode.text)")
            #expect(try byCode.json()["replayed"] as? Int == 1)
            #expect(try await admin.audits("DEAD_EVENTS_REPLAYED").map(\.operator) == ["alice"])

            // Test user.
            let flagged = try await admin.act("/admin/v1/users/tester-1/test-user", ["enabled": true, "reason": "QA"])
            #expect(flagged.status == 200, "\(flagged.text)")
            #expect(try flagged.json()["isTestUser"] as? Bool == true)
            #expect(try flagged.json()["wasTestUser"] as? Bool == false)
            #expect(try await admin.audits("TEST_USER_FLAGGED").map(\.operator) == ["alice"])

            // Credits: the user must exist; a number books once.
            let unknown = try await admin.act(
                "/admin/v1/users/nobody/credits/adjustments", ["pool": "PERMANENT", "amount": 3, "number": "A-1", "reason": "goodwill"])
            #expect(unknown.status == 404, "\(unknown.text)")
            let adjustment = ["pool": "PERMANENT", "amount": "2.5", "number": "A-1", "reason": "goodwill"]
            let booked = try await admin.act("/admin/v1/users/tester-1/credits/adjustments", adjustment)
            #expect(booked.status == 200, "\(booked.text)")
            #expect(try booked.json()["balanceAfter"] as? String == "2.5")
            #expect(try booked.json()["booked"] as? Bool == true)
            let retried = try await admin.act("/admin/v1/users/tester-1/credits/adjustments", adjustment)
            #expect(try retried.json()["booked"] as? Bool == false)
            var other = adjustment
            other["amount"] = "1"
            let conflict = try await admin.act("/admin/v1/users/tester-1/credits/adjustments", other)
            #expect(conflict.status == 409)
            #expect(conflict.code == "ADJUSTMENT_NUMBER_CONFLICT")
            #expect(try await admin.count("SELECT count(*) FROM audit_log WHERE operator = 'alice' AND reason = 'goodwill'") == 1)

            // Chains: an unknown id, a known one, attribution, a chain that is not frozen.
            let notFound = try await admin.act("/admin/v1/chains/1234/requery", ["reason": "check"])
            #expect(notFound.status == 404)
            #expect(notFound.code == "CHAIN_NOT_FOUND")
            let requery = try await admin.act("/admin/v1/chains/\(id)/requery", ["reason": "check"])
            #expect(requery.status == 200, "\(requery.text)")
            #expect(try requery.json()["status"] as? String == "PENDING")
            #expect(try requery.json()["environment"] as? String == "Sandbox")
            #expect(try await admin.audits("REQUERY_REQUESTED").map(\.operator) == ["alice"])
            let attributed = try await admin.act("/admin/v1/chains/\(id)/attribute", ["userId": "tester-1", "reason": "ticket 7"])
            #expect(attributed.status == 200, "\(attributed.text)")
            #expect((try attributed.json()["binding"] as? [String: Any])?["userId"] as? String == "tester-1")
            let conflicting = try await admin.act("/admin/v1/chains/\(id)/attribute", ["userId": "someone-else", "reason": "t"])
            #expect(conflicting.status == 409)
            #expect(conflicting.code == "ACCOUNT_CONFLICT")
            let notFrozen = try await admin.act("/admin/v1/chains/\(id)/unfreeze", ["ownerUserId": "tester-1", "reason": "t"])
            #expect(notFrozen.status == 409)
            #expect(notFrozen.code == "CHAIN_NOT_FROZEN")
            #expect(try await admin.act("/admin/v1/chains/not-an-id!/requery", ["reason": "r"]).status == 400)

            // Recovery of a range.
            let now = Date()
            let range: [String: Any] = [
                "from": RFC3339.string(from: now - 3600), "to": RFC3339.string(from: now), "environment": "Sandbox", "reason": "outage",
            ]
            let recovery = try await admin.act("/admin/v1/recoveries", range)
            #expect(recovery.status == 200, "\(recovery.text)")
            #expect(try recovery.json()["kind"] as? String == "RECOVERY")
            var tooOld = range
            tooOld["from"] = RFC3339.string(from: now - 90 * 86_400)
            #expect(try await admin.act("/admin/v1/recoveries", tooOld).status == 400)
            #expect(try await admin.audits("RECOVERY_REQUESTED").map(\.operator) == ["alice"])
        }
    }
}

extension AdminTestApp {
    func count(_ sql: String) async throws -> Int { try await app.count(sql) }
}
