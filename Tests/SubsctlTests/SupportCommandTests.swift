import Foundation
import Postgres
import TestSupport
import Testing

/// `--help` and `--version` everywhere, the deprecated `--user`, and the support reads
/// (`subsctl lookup`, `subsctl events list|summary`) against a real database.
@Suite(.timeLimit(.minutes(2)))
struct SupportCommandTests {
    /// Every command path `subsctl help` lists.
    static func commandPaths() async throws -> [[String]] {
        let listing = await SubsctlInProcess.run(["help"], environment: [:]).stdout
        return listing.split(separator: "\n").filter { $0.hasPrefix("  subsctl ") }.map { line in
            Array(
                line.dropFirst("  subsctl ".count).split(separator: " ").prefix { word in
                    word.allSatisfy { $0.isLowercase || $0 == "-" } && !word.hasPrefix("-")
                }
            )
            .map(String.init)
        }
    }

    @Test func everyCommandAndGroupAnswersHelp() async throws {
        let paths = try await Self.commandPaths()
        #expect(paths.contains(["replay"]) && paths.contains(["lookup"]) && paths.contains(["events", "list"]))
        for path in paths {
            let run = await SubsctlInProcess.run(path + ["--help"], environment: [:])
            #expect(run.status == 0, "\(path): \(run.stderr)")
            #expect(run.stdout.hasPrefix("usage: subsctl \(path.joined(separator: " "))"), "\(path): \(run.stdout)")
        }
        let replay = await SubsctlInProcess.run(["replay", "--error-code", "X", "--help"], environment: [:])
        #expect(replay.status == 0 && replay.stdout.contains("--error-code"), "\(replay.stderr)")
        for group in ["chain", "events", "credits"] {
            let run = await SubsctlInProcess.run([group, "--help"], environment: [:])
            #expect(run.status == 0, "\(group): \(run.stderr)")
            let listed = paths.filter { $0.first == group }
            #expect(listed.count >= 2)
            for path in listed { #expect(run.stdout.contains("subsctl \(path.joined(separator: " "))"), "\(group)") }
        }
        #expect(await SubsctlInProcess.run(["chain", "requery", "-h"], environment: [:]).stdout.contains("--original-transaction-id"))
        let version = await SubsctlInProcess.run(["--version"], environment: [:])
        #expect(version.status == 0)
        #expect(version.stdout.hasPrefix("subsctl "))
        #expect(await SubsctlInProcess.run(["chain"], environment: [:]).status == 64)
    }

    @Test func userIDIsTheFlagAndUserItsDeprecatedAlias() async throws {
        let secret = String(repeating: "s", count: 32)
        let current = await SubsctlInProcess.run(["dev-token", "--user-id", "u1"], environment: ["USER_TOKEN_HS256_SECRET": secret])
        #expect(current.status == 0)
        #expect(!current.stderr.contains("deprecated"))
        let old = await SubsctlInProcess.run(["dev-token", "--user", "u1"], environment: ["USER_TOKEN_HS256_SECRET": secret])
        #expect(old.status == 0)
        #expect(old.stderr.contains("--user is deprecated: use --user-id"))
        #expect(old.stdout.split(separator: ".").count == 3)
    }

    @Test func lookupAndTheQueueReadTheDatabase() async throws {
        try await withTestDatabase("subsctl") { database in
            let environment = ["DATABASE_URL": database.url]
            try await database.pool.query(
                """
                WITH u AS (INSERT INTO app_user (user_id) VALUES ('case-user'))
                INSERT INTO user_subscription (environment, original_transaction_id, user_id, active_product_id, status,
                    auto_renew_enabled, expires_at, last_transaction_id, last_signed_date)
                VALUES ('Sandbox', '7000001', 'case-user', 'com.example.monthly', 'ACTIVE', true, now() + interval '1 day',
                    '7000001', now())
                """)
            try await database.pool.query(
                """
                WITH e AS (
                    SELECT nextval('inbound_event_id_seq') AS id, now() AS received_at, v.*
                      FROM (VALUES ('uuid-dead', 'DID_RENEW', '7000002', 'DEAD', 'UNMATCHED_PRODUCT', 8),
                                   ('uuid-ok', 'SUBSCRIBED', '7000001', 'SUCCEEDED', NULL, 0))
                           AS v(notification_uuid, notification_type, transaction_id, process_status, error_code, retry_count)
                ), key AS (
                    INSERT INTO inbound_event_key (id, received_at, notification_uuid, environment, transaction_id, original_transaction_id)
                    SELECT id, received_at, notification_uuid, 'Sandbox', transaction_id, '7000001' FROM e
                )
                INSERT INTO inbound_event (id, received_at, kind, notification_uuid, notification_type, environment, transaction_id,
                    original_transaction_id, routing_key, process_status, error_code, retry_count)
                SELECT id, received_at, 'notification', notification_uuid, notification_type, 'Sandbox', transaction_id, '7000001',
                       '7000001', process_status, error_code, retry_count
                  FROM e
                """)
            let text = await SubsctlInProcess.run(["lookup", "7000002"], environment: environment)
            #expect(text.status == 0, "\(text.stderr)")
            #expect(text.stdout.contains("matches: transactionId=7000002"), "\(text.stdout)")
            #expect(text.stdout.contains("user=case-user"))
            #expect(text.stdout.contains("chain=Sandbox:7000001 status=ACTIVE"))
            #expect(text.stdout.contains("DID_RENEW: DEAD UNMATCHED_PRODUCT"))
            let json = await SubsctlInProcess.run(["lookup", "uuid-ok", "--json"], environment: environment)
            #expect(json.status == 0, "\(json.stderr)")
            let body = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any] ?? [:]
            #expect((body["matches"] as? [[String: Any]])?.first?["kind"] as? String == "notificationUUID")
            let found = body["case"] as? [String: Any] ?? [:]
            #expect((found["user"] as? [String: Any])?["userId"] as? String == "case-user")
            #expect((found["events"] as? [Any])?.count == 2)
            let missing = await SubsctlInProcess.run(["lookup", "nothing-here"], environment: environment)
            #expect(missing.status == 1)
            #expect(missing.error.contains("nothing has the id"))

            let dead = await SubsctlInProcess.run(["events", "list", "--status", "DEAD", "--json"], environment: environment)
            #expect(dead.status == 0, "\(dead.stderr)")
            let items = (try JSONSerialization.jsonObject(with: Data(dead.stdout.utf8)) as? [String: Any])?["items"] as? [[String: Any]]
            #expect(items?.map { $0["notificationUUID"] as? String } == ["uuid-dead"])
            let byCode = await SubsctlInProcess.run(["events", "list", "--code", "UNMATCHED_PRODUCT"], environment: environment)
            #expect(byCode.stdout.hasPrefix("event="), "\(byCode.stdout)")
            #expect(byCode.stdout.contains("status=DEAD error=UNMATCHED_PRODUCT type=DID_RENEW chain=Sandbox:7000001"))
            #expect(await SubsctlInProcess.run(["events", "list", "--status", "LOST"], environment: environment).status == 64)
            let summary = await SubsctlInProcess.run(["events", "summary"], environment: environment)
            #expect(summary.stdout.contains("status=DEAD errorCode=UNMATCHED_PRODUCT count=1"), "\(summary.stdout)")
            #expect(summary.stdout.contains("status=SUCCEEDED errorCode=- count=1"))
            let summaryJSON = await SubsctlInProcess.run(["events", "summary", "--json"], environment: environment)
            #expect(((try JSONSerialization.jsonObject(with: Data(summaryJSON.stdout.utf8)) as? [String: Any])?["items"] as? [Any])?.count == 2)
        }
    }
}
