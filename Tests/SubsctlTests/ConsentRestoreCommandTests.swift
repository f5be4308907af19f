import Foundation
import Postgres
import TestSupport
import Testing

/// `subsctl consent restore` against a real database: the admin API's restore, audited, with its
/// event, a `--json` answer and refusals as exit statuses.
@Suite(.timeLimit(.minutes(2)))
struct ConsentRestoreCommandTests {
    @Test func restoresARescindedConsentOnce() async throws {
        try await withTestDatabase("subsctl") { database in
            let rows = TestRows(pool: database.pool, bundleID: "com.example.subscriptions")
            try await rows.addUser("u1")
            try await rows.addUser("u2")
            try await database.pool.query(
                "UPDATE app_user SET consent_rescinded_at = '2026-12-01T08:00:00Z' WHERE user_id = 'u1'")
            let environment = ["DATABASE_URL": database.url]
            func run(_ arguments: [String]) async -> SubsctlRun { await SubsctlInProcess.run(arguments, environment: environment) }
            let restore = ["consent", "restore", "--operator", "ops-alice"]

            #expect(await run(restore + ["--user-id", "u1"]).status == 64, "a reason is required")
            #expect(await run(restore + ["--reason", "r"]).status == 64, "a user is required")
            let nobody = await run(restore + ["--user-id", "nobody", "--reason", "r"])
            #expect(nobody.status == 1 && nobody.stderr.contains("no user nobody"), "\(nobody.stderr)")
            let never = await run(restore + ["--user-id", "u2", "--reason", "r"])
            #expect(never.status == 1 && never.stderr.contains("not rescinded"), "\(never.stderr)")

            let restored = await run(restore + ["--user-id", "u1", "--reason", "parent consented again", "--json"])
            #expect(restored.status == 0, "\(restored.stderr)")
            let answer = try #require(try JSONSerialization.jsonObject(with: Data(restored.stdout.utf8)) as? [String: Any])
            #expect(answer["userId"] as? String == "u1" && answer["entitlements"] as? [String] == [], "\(answer)")
            #expect((answer["rescindedAt"] as? String)?.hasPrefix("2026-12-01T08:00:00") == true, "\(answer)")
            #expect(try await database.count("SELECT count(*) FROM app_user WHERE consent_rescinded_at IS NOT NULL") == 0)
            #expect(
                try await database.count(
                    "SELECT count(*) FROM audit_log WHERE action = 'CONSENT_RESTORED' AND operator = 'ops-alice'") == 1)
            #expect(try await database.count("SELECT count(*) FROM outbound_event WHERE type = 'account.consent_restored'") == 1)

            let again = await run(restore + ["--user-id", "u1", "--reason", "again"])
            #expect(again.status == 1 && again.stderr.contains("not rescinded"), "\(again.stderr)")
            let help = await run(["consent", "restore", "--help"])
            #expect(help.stdout.hasPrefix("usage: subsctl consent restore --user-id"), "\(help.stdout)")
        }
    }
}
