import Foundation
import Postgres
import TestSupport
import Testing

/// `subsctl rates apply`, `subsctl credits run-jobs` and `subsctl credits adjust` against a real database.
@Suite(.timeLimit(.minutes(2)))
struct CreditsCommandTests {
    static let demoPath = ServiceProcess.packageRoot.appendingPathComponent("deploy/local/rates.json").path

    @Test func ratesApplyInsertsNewVersionsOnceAndRefusesChangingAStoredOne() async throws {
        try await withTestDatabase("subsctl") { database in
            let environment = ["DATABASE_URL": database.url]
            let first = await SubsctlInProcess.run(
                ["rates", "apply", "--operator", "ops-alice", "--reason", "launch", Self.demoPath], environment: environment)
            #expect(first.status == 0, "\(first.stderr)")
            #expect(first.stdout.split(separator: "\n").last == "inserted=3 unchanged=0")
            #expect(
                try await database.count("SELECT count(*) FROM audit_log WHERE action = 'CREDIT_RATE_VERSION_CREATED' AND operator = 'ops-alice'")
                    == 3)
            let again = await SubsctlInProcess.run(["rates", "apply", Self.demoPath], environment: environment)
            #expect(again.stdout.split(separator: "\n").last == "inserted=0 unchanged=3")

            let changed = FileManager.default.temporaryDirectory.appendingPathComponent("rates-\(UUID().uuidString).json")
            defer { try? FileManager.default.removeItem(at: changed) }
            try Data(
                #"{"rates":[{"code":"chat.message","version":1,"microCreditsPerUnit":1,"effectiveFrom":"2026-01-01T00:00:00Z"}]}"#.utf8
            ).write(to: changed)
            let refused = await SubsctlInProcess.run(["rates", "apply", changed.path], environment: environment)
            #expect(refused.status == 1 && refused.stderr.contains("new version"), "\(refused.stderr)")
            try Data(#"{"rates":[{"code":"bad code","version":0,"microCreditsPerUnit":0,"effectiveFrom":"soon"}]}"#.utf8).write(to: changed)
            let invalid = await SubsctlInProcess.run(["rates", "apply", changed.path], environment: environment)
            #expect(invalid.status == 1 && invalid.stderr.split(separator: "\n").count >= 5, "\(invalid.stderr)")
            #expect(try await database.count("SELECT count(*) FROM credit_rate_version") == 3)
        }
    }

    @Test func runJobsClosesPastDaysAndReportsTheLedgerCheck() async throws {
        try await withTestDatabase("subsctl") { database in
            try await database.pool.query(
                PostgresQuery(
                    unsafeSQL: """
                        INSERT INTO app_user (user_id) VALUES ('u1');
                        INSERT INTO credit_daily_bill (user_id, day, total_cost) VALUES ('u1', '2026-03-01', 250000);
                        """))
            let run = await SubsctlInProcess.run(
                ["credits", "run-jobs", "--now", "2026-03-02T00:00:05Z", "--welcome-credits", "3"], environment: ["DATABASE_URL": database.url])
            #expect(run.status == 0, "\(run.stderr)")
            #expect(run.stdout.contains("welcome_grants=1 monthly_grants=0 bills_closed=1 pools_cleared=0"), "\(run.stdout)")
            #expect(run.stdout.contains("ledger_mismatches=0"))
            // 3 welcome credits, minus the 0.75 that rounds the day's 0.25 up to 1.
            #expect(try await database.count("SELECT balance FROM credit_account WHERE user_id = 'u1'") == 2_250_000)
        }
    }

    @Test func adjustCreditsOrDebitsAPoolOncePerNumberNeverBelowZero() async throws {
        try await withTestDatabase("subsctl") { database in
            try await database.pool.query("INSERT INTO app_user (user_id) VALUES ('u1')")
            let environment = ["DATABASE_URL": database.url]
            func adjust(_ amount: String, _ number: String, user: String = "u1", pool: String = "PERMANENT") async -> SubsctlRun {
                await SubsctlInProcess.run(
                    [
                        "credits", "adjust", "--user-id", user, "--pool", pool, "--amount", amount, "--number", number, "--operator", "ops-alice",
                        "--reason", "ticket 42",
                    ], environment: environment)
            }
            let credit = await adjust("3", "A-1")
            #expect(credit.status == 0, "\(credit.stderr)")
            #expect(credit.stdout == "adjusted adjustment=A-1 user=u1 pool=PERMANENT amount=3 applied=3 unrecoverable=0 balance_after=3\n")
            let debit = await adjust("-4.5", "A-2")
            #expect(debit.stdout == "adjusted adjustment=A-2 user=u1 pool=PERMANENT amount=-4.5 applied=-3 unrecoverable=1.5 balance_after=0\n")
            let retried = await adjust("-4.5", "A-2")
            #expect(retried.status == 0)
            #expect(
                retried.stdout
                    == "already adjusted, nothing booked: adjustment=A-2 user=u1 pool=PERMANENT amount=-4.5 applied=-3 unrecoverable=1.5 balance_after=0\n"
            )
            #expect(try await database.count("SELECT count(*) FROM credit_ledger WHERE entry_type = 'ADJUSTMENT'") == 2)
            #expect(try await database.count("SELECT count(*) FROM audit_log WHERE action = 'CREDITS_ADJUSTED' AND operator = 'ops-alice'") == 2)

            let reused = await adjust("-1", "A-2")
            #expect(reused.status == 1 && reused.stderr.contains("was used for another adjustment"), "\(reused.stderr)")
            let unknown = await adjust("-1", "A-3", user: "nobody")
            #expect(unknown.status == 1 && unknown.stderr.contains("no user nobody"), "\(unknown.stderr)")
            for (amount, pool) in [("abc", "PERMANENT"), ("0", "PERMANENT"), ("1.0000001", "PERMANENT"), ("1", "GOLD")] {
                let refused = await adjust(amount, "A-4", pool: pool)
                #expect(refused.status == 64 && refused.stderr.contains("usage: subsctl credits adjust"), "\(amount) \(pool): \(refused.stderr)")
            }
            let missing = await SubsctlInProcess.run(
                ["credits", "adjust", "--user", "u1", "--pool", "WELCOME", "--amount", "1"], environment: environment)
            #expect(missing.status == 64 && missing.stderr.contains("--number is required"), "\(missing.stderr)")
            #expect(try await database.count("SELECT balance FROM credit_account WHERE user_id = 'u1'") == 0)
            #expect(try await database.count("SELECT count(*) FROM credit_adjustment") == 2)
        }
    }
}
