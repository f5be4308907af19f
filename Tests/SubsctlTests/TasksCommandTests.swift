import Foundation
import Postgres
import Storage
import TestSupport
import Testing

/// `subsctl tasks` against a real database: the queue newest first, filtered by kind and status,
/// as text and `--json`, and refusals of bad filters as usage errors.
@Suite(.timeLimit(.minutes(2)))
struct TasksCommandTests {
    @Test func listsTheQueueByKindAndStatus() async throws {
        try await withTestDatabase("subsctl") { database in
            let store = TaskStore(pool: database.pool)
            let requery = try await store.requestRequery(
                environment: "Sandbox", originalTransactionID: "2000", reason: "test", operator: "ops")
            try await database.pool.transaction { db in
                try await TaskStore.requestFinishTransactions([("Production", "1001"), ("Production", "1002")], requestedBy: "w1", on: db)
            }
            try await database.pool.query(
                """
                UPDATE fulfillment_task SET status = 'FAILED', error_code = 'FINISH_TRANSACTION_FAILED', error_message = 'Apple said 400',
                       completed_at = now() WHERE transaction_id = '1001'
                """)
            let environment = ["DATABASE_URL": database.url]
            func run(_ arguments: [String]) async -> SubsctlRun { await SubsctlInProcess.run(arguments, environment: environment) }

            let all = await run(["tasks", "--json"])
            #expect(all.status == 0, "\(all.stderr)")
            let answer = try #require(try JSONSerialization.jsonObject(with: Data(all.stdout.utf8)) as? [String: Any])
            let listed = try #require(answer["tasks"] as? [[String: Any]])
            #expect(listed.map { $0["subject"] as? String } == ["1002", "1001", "2000"], "\(listed)")
            #expect(listed.last?["id"] as? Int == Int(requery) && listed.last?["kind"] as? String == "REQUERY")

            let failed = await run(["tasks", "--kind", "finish_transaction", "--status", "FAILED"])
            #expect(failed.status == 0, "\(failed.stderr)")
            #expect(failed.stdout.contains("kind=FINISH_TRANSACTION") && failed.stdout.contains("subject=1001"), "\(failed.stdout)")
            #expect(failed.stdout.contains("error=FINISH_TRANSACTION_FAILED message=\"Apple said 400\""), "\(failed.stdout)")
            #expect(!failed.stdout.contains("subject=1002") && !failed.stdout.contains("subject=2000"), "\(failed.stdout)")
            let none = await run(["tasks", "--kind", "IMPORT"])
            #expect(none.status == 0 && none.stdout.contains("no tasks"), "\(none.stdout)")
            let one = await run(["tasks", "--limit", "1", "--json"])
            let first = try #require(try JSONSerialization.jsonObject(with: Data(one.stdout.utf8)) as? [String: Any])
            #expect((first["tasks"] as? [[String: Any]])?.count == 1)

            for (arguments, complaint) in [
                (["tasks", "--kind", "REFUND"], "--kind must be"), (["tasks", "--status", "RUNNING"], "--status must be"),
                (["tasks", "--limit", "0"], "--limit must be"), (["tasks", "--limit", "many"], "--limit must be"),
            ] {
                let refused = await run(arguments)
                #expect(refused.status == 64 && refused.stderr.contains(complaint), "\(arguments): \(refused.stderr)")
            }
        }
    }
}
