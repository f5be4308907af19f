import Crypto
import Foundation
import Postgres
import TestSupport
import Testing

/// `subsctl webhooks …` against a real database: create (its checks and the secret shown once),
/// list, show, rotate-secret, deliveries, retry, delete, each with `--json`.
@Suite(.timeLimit(.minutes(3)))
struct WebhookCommandTests {
    static func json(_ arguments: [String], _ environment: [String: String]) async throws -> [String: Any] {
        let run = await SubsctlInProcess.run(arguments + ["--json"], environment: environment)
        #expect(run.status == 0, "\(arguments): \(run.stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any], "\(run.stdout)")
    }

    @Test func managesAnEndpointFromTheShell() async throws {
        try await withTestDatabase("subsctl") { database in
            let keys = "k1:" + Data(SecureRandom.bytes(32)).base64EncodedString()
            let environment = ["DATABASE_URL": database.url, "PAYLOAD_ENCRYPTION_KEYS": keys]

            // The address policy applies here as in the admin API.
            let refused = await SubsctlInProcess.run(
                ["webhooks", "create", "--url", "https://169.254.169.254/latest"], environment: environment)
            #expect(refused.status == 1)
            #expect(refused.error.contains("metadata"), "\(refused.stderr)")
            let unsealed = await SubsctlInProcess.run(
                ["webhooks", "create", "--url", "https://93.184.216.34/h"], environment: ["DATABASE_URL": database.url])
            #expect(unsealed.status == 78, "\(unsealed.stderr)")

            let created = try await Self.json(
                ["webhooks", "create", "--url", "https://93.184.216.34/h", "--event-types", "order.fulfilled", "--operator", "carol"],
                environment)
            let id = try #require(created["id"] as? String)
            let secret = try #require(created["secret"] as? String)
            #expect(secret.hasPrefix("whsec_"))
            #expect(created["eventTypes"] as? [String] == ["order.fulfilled"])

            let list = try await Self.json(["webhooks", "list"], environment)
            #expect((list["items"] as? [[String: Any]])?.map { $0["id"] as? String } == [id])
            #expect((list["items"] as? [[String: Any]])?.first?["secret"] == nil)
            let shown = try await Self.json(["webhooks", "show", id], environment)
            #expect(shown["url"] as? String == "https://93.184.216.34/h")

            let rotated = try await Self.json(["webhooks", "rotate-secret", id, "--reason", "yearly rotation"], environment)
            #expect((rotated["secret"] as? String).map { $0.hasPrefix("whsec_") && $0 != secret } == true)
            #expect(rotated["previousSecretExpiresAt"] is String)

            try await database.pool.query(
                """
                INSERT INTO webhook_delivery (endpoint_id, event_id, type, payload, status, attempts, last_status_code)
                VALUES (\(id), 'evt_cli', 'order.fulfilled', '\\x7b7d'::bytea, 'DEAD', 12, 503)
                """)
            let dead = try await Self.json(["webhooks", "deliveries", id, "--status", "DEAD"], environment)
            #expect((dead["items"] as? [[String: Any]])?.first?["eventId"] as? String == "evt_cli")
            let retried = try await Self.json(["webhooks", "retry", id, "evt_cli", "--reason", "receiver back"], environment)
            #expect(retried["status"] as? String == "PENDING")
            #expect(try await database.count("SELECT count(*) FROM audit_log WHERE action = 'webhook.retry'") == 1)

            let deleted = try await Self.json(["webhooks", "delete", id, "--reason", "retired"], environment)
            #expect(deleted["deletedAt"] is String)
            let again = await SubsctlInProcess.run(["webhooks", "delete", id, "--reason", "again"], environment: environment)
            #expect(again.status == 1)
            #expect(try await database.count("SELECT count(*) FROM audit_log WHERE action LIKE 'webhook.%'") == 4)
        }
    }
}
