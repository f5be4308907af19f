import Foundation
import Postgres
import TestSupport
import Testing

/// Consent, paging arguments and the metering API's validation.
@Suite(.timeLimit(.minutes(3)))
struct AccountRouteTests {
    static let consentPath = "/api/v1/subscriptions/consumption-consent"

    @Test func consentIsUnknownUntilChosenAndEveryChoiceIsAudited() async throws {
        try await IngressTestApp.with { app in
            #expect(try await app.read(Self.consentPath, as: "newbie")["consumptionData"] as? String == "UNKNOWN")
            for choice in ["GRANTED", "DENIED", "UNKNOWN", "GRANTED"] {
                let response = try await app.send("PUT", Self.consentPath, json: ["consumptionData": choice], headers: app.authorized("newbie"))
                #expect(response.status == 200, "\(response.text)")
                #expect(try response.json()["consumptionData"] as? String == choice)
                #expect(try await app.read(Self.consentPath, as: "newbie")["consumptionData"] as? String == choice)
            }
            #expect(try await app.count("SELECT count(*) FROM audit_log WHERE action = 'CONSENT_RECORDED' AND operator = 'user'") == 4)
            #expect(try await app.read(Self.consentPath, as: "someone-else")["consumptionData"] as? String == "UNKNOWN")
        }
    }

    @Test func consentRefusesValuesItDoesNotKnow() async throws {
        try await IngressTestApp.with { app in
            for body: Any in [["consumptionData": "MAYBE"], ["consumptionData": true], ["other": "GRANTED"]] {
                let response = try await app.send("PUT", Self.consentPath, json: body, headers: app.authorized("u1"))
                #expect(response.status == 400, "\(body)")
                #expect(response.code == "MALFORMED_JSON", "\(body)")
            }
            #expect(try await app.count("SELECT count(*) FROM audit_log") == 0)
        }
    }

    @Test func aBodyWithADuplicateKeyIsRefusedNotReadAsItsFirstOrLastValue() async throws {
        try await IngressTestApp.with { app in
            let body = Array(#"{"consumptionData":"GRANTED","consumptionData":"DENIED"}"#.utf8)
            let response = await app.request(
                "PUT", Self.consentPath, headers: app.authorized("u1").merging(["Content-Type": "application/json"]) { a, _ in a },
                body: body)
            #expect(response.status == 400, "\(response.text)")
            #expect(response.code == "MALFORMED_JSON")
            let stored = try await app.count("SELECT count(*) FROM user_consent")
            #expect(stored == 0)
        }
    }

    @Test func anEmptyCursorOrLimitMeansTheFirstPageWithTheDefaultSize() async throws {
        try await IngressTestApp.with { app in
            try await app.rows.addUser("u1")
            try await app.pool.query(
                """
                INSERT INTO credit_grant (grant_key, user_id, pool, amount, reason)
                SELECT 'g' || n, 'u1', 'SUBSCRIPTION', 1000000, 'RENEWAL' FROM generate_series(1, 25) n
                """)
            let page = try await app.read("/api/v1/credits/grants?cursor=&limit=", as: "u1")
            #expect((page["items"] as? [Any])?.count == 20)
            #expect(page["nextCursor"] is String)
        }
    }

    @Test func cursorsAreRefusedAcrossUsersOnEveryList() async throws {
        try await IngressTestApp.with { app in
            try await app.rows.addUser("u1")
            try await app.pool.query(
                "INSERT INTO credit_daily_bill (user_id, day) SELECT 'u1', date '2026-01-01' + n FROM generate_series(1, 5) n")
            let cursor = try #require(try await app.read("/api/v1/credits/daily-bills?limit=2", as: "u1")["nextCursor"] as? String)
            #expect(try await app.read("/api/v1/credits/daily-bills?limit=2&cursor=\(cursor)", as: "u1")["items"] is [Any])
            let foreign = await app.get("/api/v1/credits/daily-bills?cursor=\(cursor)", headers: app.authorized("u2"))
            #expect(foreign.status == 400)
            #expect(foreign.code == "INVALID_CURSOR")
            for bad in ["%00", "a.b", ".", String(repeating: ".", count: 10)] {
                let response = await app.get("/api/v1/credits/daily-bills?cursor=\(bad)", headers: app.authorized("u1"))
                #expect(response.code == "INVALID_CURSOR", "\(bad)")
            }
        }
    }

    @Test func pagingContinuesAfterNewRowsWithoutRepeats() async throws {
        try await IngressTestApp.with { app in
            try await app.rows.addUser("u1")
            try await app.pool.query(
                """
                INSERT INTO credit_grant (grant_key, user_id, pool, amount, reason, created_at)
                SELECT 'old' || n, 'u1', 'SUBSCRIPTION', 1000000, 'RENEWAL', now() - n * interval '1 minute' FROM generate_series(1, 6) n
                """)
            let first = try await app.read("/api/v1/credits/grants?limit=3", as: "u1")
            let cursor = try #require(first["nextCursor"] as? String)
            // A newer grant arrives between the pages: it belongs before the first page, not in the second.
            try await app.pool.query(
                "INSERT INTO credit_grant (grant_key, user_id, pool, amount, reason) VALUES ('new', 'u1', 'SUBSCRIPTION', 1000000, 'RENEWAL')")
            let second = try await app.read("/api/v1/credits/grants?limit=3&cursor=\(cursor)", as: "u1")
            let keys = (second["items"] as? [[String: Any]])?.compactMap { $0["grantKey"] as? String }
            #expect(keys == ["old4", "old5", "old6"])
            #expect(second["nextCursor"] is NSNull)
        }
    }

    @Test func usageIsValidatedBeforeAnythingIsCharged() async throws {
        try await IngressTestApp.with { app in
            let valid: [String: Any] = ["idempotencyKey": "k1", "userId": "u1", "units": 1, "rate": "chat"]
            let cases: [(String, [String: Any], [String: String])] = [
                ("no key", valid.filter { $0.key != "idempotencyKey" }, [:]),
                ("keys differ", valid, ["Idempotency-Key": "k2"]),
                ("no units", valid.merging(["units": 0]) { _, new in new }, [:]),
                ("too many units", valid.merging(["units": Int64.max]) { _, new in new }, [:]),
                ("empty user", valid.merging(["userId": ""]) { _, new in new }, [:]),
                ("empty rate", valid.merging(["rate": ""]) { _, new in new }, [:]),
                ("future", valid.merging(["occurredAt": RFC3339Text.inAnHour]) { _, new in new }, [:]),
            ]
            for (name, body, headers) in cases {
                let response = try await app.post(
                    "/api/v1/credits/usage", json: body, headers: app.serviceAuthorization.merging(headers) { a, _ in a })
                #expect(response.status == 400, "\(name): \(response.text)")
                #expect(response.code == "INVALID_REQUEST", "\(name)")
            }
            let malformed = try await app.post("/api/v1/credits/usage", json: ["userId": "u1"], headers: app.serviceAuthorization)
            #expect(malformed.code == "MALFORMED_JSON")
            #expect(try await app.count("SELECT count(*) FROM credit_ledger") == 0)
        }
    }

    @Test func checkNeedsItsParameters() async throws {
        try await IngressTestApp.with { app in
            for query in [
                "", "?userId=u1&units=1", "?userId=u1&rate=r", "?units=1&rate=r", "?userId=u1&units=one&rate=r", "?userId=u1&units=0&rate=r",
            ] {
                let response = await app.get("/api/v1/credits/check\(query)", headers: app.serviceAuthorization)
                #expect(response.status == 400, "\(query)")
                #expect(response.code == "INVALID_REQUEST", "\(query)")
            }
        }
    }

    @Test func anUnknownRateIs422() async throws {
        try await IngressTestApp.with { app in
            let usage = try await app.post(
                "/api/v1/credits/usage", json: ["idempotencyKey": "k1", "userId": "u1", "units": 1, "rate": "no-such-rate"],
                headers: app.serviceAuthorization)
            #expect(usage.status == 422, "\(usage.text)")
            #expect(usage.code == "RATE_UNKNOWN")
            let check = await app.get("/api/v1/credits/check?userId=u1&units=1&rate=no-such-rate", headers: app.serviceAuthorization)
            #expect(check.status == 422, "\(check.text)")
            #expect(check.code == "RATE_UNKNOWN")
        }
    }
}

/// RFC 3339 times for request bodies.
enum RFC3339Text {
    static var inAnHour: String {
        let formatter = ISO8601DateFormatter()
        return formatter.string(from: Date() + 3600)
    }
}
