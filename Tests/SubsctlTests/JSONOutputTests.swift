import Foundation
import Postgres
import ServiceRuntime
import TestSupport
import Testing

/// `--json` on the commands that print state: one JSON object on stdout that parses and carries
/// the fields the text shows, against a real database.
@Suite(.timeLimit(.minutes(3)))
struct JSONOutputTests {
    static let catalogue = ServiceProcess.packageRoot.appendingPathComponent("deploy/local/catalog.json").path
    static let rates = ServiceProcess.packageRoot.appendingPathComponent("deploy/local/rates.json").path

    /// Runs the command with `--json` and returns its answer as an object.
    static func json(_ arguments: [String], _ environment: [String: String]) async throws -> [String: Any] {
        let run = await SubsctlInProcess.run(arguments + ["--json"], environment: environment)
        #expect(run.status == 0, "\(arguments): \(run.stderr)")
        #expect(run.stdout.hasSuffix("}\n") && run.stdout.filter { $0 == "\n" }.count == 1, "\(arguments): one line: \(run.stdout)")
        return try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any], "\(arguments): \(run.stdout)")
    }

    @Test func everyStateCommandAnswersJSON() async throws {
        try await withTestDatabase("subsctl") { database in
            let environment = ["DATABASE_URL": database.url]
            try await database.pool.query(
                """
                WITH u AS (INSERT INTO app_user (user_id) VALUES ('u1'))
                INSERT INTO user_subscription (environment, original_transaction_id, user_id, active_product_id, status,
                    auto_renew_enabled, expires_at, last_transaction_id, last_signed_date)
                VALUES ('Sandbox', '7000001', 'u1', 'com.example.pro.monthly', 'ACTIVE', true, now() + interval '1 day',
                    '7000001', now())
                """)

            let catalogue = try await Self.json(["catalog", "apply", Self.catalogue], environment)
            #expect((catalogue["inserted"] as? [String])?.contains("com.example.pro.yearly") == true, "\(catalogue)")
            #expect(catalogue["updated"] as? [String] == [] && catalogue["unchanged"] as? [String] == [])

            let rates = try await Self.json(["rates", "apply", Self.rates], environment)
            #expect((rates["inserted"] as? [String])?.count == 3 && rates["unchanged"] as? [String] == [], "\(rates)")

            let migrated = try await Self.json(["migrate"], environment)
            #expect(migrated["applied"] as? [Int] == [], "\(migrated)")

            let testUser = try await Self.json(["test-user", "--user-id", "u1", "--enable", "true"], environment)
            #expect(testUser["userId"] as? String == "u1" && testUser["isTestUser"] as? Bool == true, "\(testUser)")
            #expect(testUser["wasTestUser"] as? Bool == false)

            let consent = try await Self.json(["consent", "--user-id", "u1", "--consumption-data", "granted"], environment)
            #expect(consent["userId"] as? String == "u1" && consent["consumptionData"] as? String == "granted", "\(consent)")
            #expect(consent["wasConsumptionData"] as? String == "unknown")

            let adjusted = try await Self.json(
                [
                    "credits", "adjust", "--user-id", "u1", "--pool", "PERMANENT", "--amount", "2.5", "--number", "J-1", "--operator", "ops",
                    "--reason", "ticket 7",
                ], environment)
            #expect(adjusted["adjustmentNo"] as? String == "J-1" && adjusted["pool"] as? String == "PERMANENT", "\(adjusted)")
            #expect(adjusted["amount"] as? String == "2.5" && adjusted["balanceAfter"] as? String == "2.5")
            #expect(adjusted["booked"] as? Bool == true)

            let jobs = try await Self.json(["credits", "run-jobs", "--welcome-credits", "3"], environment)
            #expect(jobs["welcomeGrants"] as? Int == 1 && jobs["ledgerMismatches"] as? Int == 0, "\(jobs)")
            for key in ["monthlyGrants", "billsClosed", "poolsCleared", "seconds"] { #expect(jobs[key] != nil, "\(key): \(jobs)") }

            let replayed = try await Self.json(["replay", "--error-code", "UNMATCHED_PRODUCT"], environment)
            #expect(replayed["errorCode"] as? String == "UNMATCHED_PRODUCT" && replayed["replayed"] as? Int == 0, "\(replayed)")

            let attributed = try await Self.json(
                ["chain", "attribute", "--original-transaction-id", "7000001", "--user-id", "u1", "--reason", "ticket 8"], environment)
            let binding = try #require(attributed["binding"] as? [String: Any], "\(attributed)")
            #expect(binding["originalTransactionId"] as? String == "7000001" && binding["userId"] as? String == "u1")
            #expect(binding["environment"] as? String == "Sandbox" && binding["source"] != nil)
            #expect(attributed["changed"] as? Bool == true && attributed["replayedEvents"] as? Int == 0)

            let requery = try await Self.json(
                ["requery", "--original-transaction-id", "7000001", "--env", "Sandbox", "--wait", "0"], environment)
            let requeryTask = try #require(requery["task"] as? [String: Any], "\(requery)")
            #expect(requeryTask["taskId"] as? Int != nil && requeryTask["status"] as? String == "PENDING", "\(requery)")

            let now = Date()
            let recover = try await Self.json(
                [
                    "recover", "--from", RFC3339.string(from: now - 3600), "--to", RFC3339.string(from: now - 60), "--env", "Sandbox",
                    "--wait", "0",
                ], environment)
            let recoverTask = try #require(recover["task"] as? [String: Any], "\(recover)")
            #expect(recoverTask["status"] as? String == "PENDING" && recoverTask["taskId"] as? Int != requeryTask["taskId"] as? Int)
            #expect(try await database.count("SELECT count(*) FROM fulfillment_task") >= 3)
        }
    }

    @Test func theUsageOfEveryStateCommandOffersJSON() async throws {
        let listing = await SubsctlInProcess.run(["help"], environment: [:]).stdout
        for command in [
            "lookup", "events list", "events summary", "requery", "recover", "test-user", "consent", "replay", "credits run-jobs",
            "credits adjust", "chain attribute", "chain unfreeze", "chain requery", "catalog apply", "rates apply", "migrate", "verify",
            "apple test-notification", "apple extend",
        ] {
            let usage = listing.split(separator: "\n").first { $0.hasPrefix("  subsctl \(command) ") || $0 == "  subsctl \(command)" }
            #expect(usage?.contains("[--json]") == true, "\(command): \(usage ?? "not listed")")
        }
    }
}
