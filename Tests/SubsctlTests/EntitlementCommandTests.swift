import Foundation
import Postgres
import TestSupport
import Testing

/// `subsctl entitlements grant|revoke|show` against a real database: the same grants as the
/// admin API, audited, with `--json` answers and refusals as exit statuses.
@Suite(.timeLimit(.minutes(2)))
struct EntitlementCommandTests {
    @Test func grantShowAndRevoke() async throws {
        try await withTestDatabase("subsctl") { database in
            try await TestRows(pool: database.pool, bundleID: "com.example.subscriptions").addUser("u1")
            let environment = ["DATABASE_URL": database.url]
            func run(_ arguments: [String]) async -> SubsctlRun { await SubsctlInProcess.run(arguments, environment: environment) }
            let grant = ["entitlements", "grant", "--user-id", "u1", "--entitlement", "pro", "--operator", "ops-alice"]

            #expect(await run(grant + ["--duration", "P7D"]).status == 64, "a reason is required")
            #expect(await run(grant + ["--reason", "r"]).status == 64, "an end or a duration is required")
            #expect(await run(grant + ["--reason", "r", "--duration", "7 days"]).status == 64)
            #expect(
                await run([
                    "entitlements", "grant", "--user-id", "u1", "--entitlement", "Pro", "--operator", "o", "--reason", "r", "--duration", "P1D",
                ]).status == 64)
            let past = await run(grant + ["--reason", "r", "--expires-at", "2020-01-01T00:00:00Z"])
            #expect(past.status == 1 && past.stderr.contains("EXPIRY_NOT_IN_FUTURE"), "\(past.stderr)")
            let nobody = await run([
                "entitlements", "grant", "--user-id", "nobody", "--entitlement", "pro", "--operator", "o", "--reason", "r", "--duration", "P1D",
            ])
            #expect(nobody.status == 1 && nobody.stderr.contains("no user nobody"))

            let granted = await run(grant + ["--reason", "outage apology", "--duration", "P7D", "--json"])
            #expect(granted.status == 0, "\(granted.stderr)")
            let view = try #require(try JSONSerialization.jsonObject(with: Data(granted.stdout.utf8)) as? [String: Any])
            #expect(view["entitlement"] as? String == "pro" && view["grantedBy"] as? String == "ops-alice" && view["inForce"] as? Bool == true)
            #expect(view["revokedAt"] is NSNull)

            let shown = await run(["entitlements", "show", "--user-id", "u1"])
            #expect(shown.status == 0 && shown.stdout.hasPrefix("user=u1: pro (promotional) until "), "\(shown.stdout)")
            let shownJSON = await run(["entitlements", "show", "--user-id", "u1", "--json"])
            let overview = try #require(try JSONSerialization.jsonObject(with: Data(shownJSON.stdout.utf8)) as? [String: Any])
            let items = try #require(overview["entitlements"] as? [[String: Any]])
            #expect(items.map { $0["source"] as? String } == ["PROMOTIONAL"] && items.map { $0["active"] as? Bool } == [true])

            let revoke = ["entitlements", "revoke", "--user-id", "u1", "--entitlement", "pro", "--operator", "ops-bob"]
            #expect(await run(revoke).status == 64, "a reason is required")
            let revoked = await run(revoke + ["--reason", "wrong user", "--json"])
            #expect(revoked.status == 0, "\(revoked.stderr)")
            let answer = try #require(try JSONSerialization.jsonObject(with: Data(revoked.stdout.utf8)) as? [String: Any])
            #expect((answer["revoked"] as? [[String: Any]])?.map { $0["revokedBy"] as? String } == ["ops-bob"])
            let again = await run(revoke + ["--reason", "again"])
            #expect(again.status == 1 && again.stderr.contains("GRANT_NOT_FOUND"))
            #expect(
                try await database.count(
                    "SELECT count(*) FROM audit_log WHERE action IN ('ENTITLEMENT_GRANTED', 'ENTITLEMENT_REVOKED')") == 2)
            #expect((await run(["entitlements", "show", "--user-id", "u1"])).stdout.hasPrefix("user=u1: no entitlement"))
        }
    }
}
