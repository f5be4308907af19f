import Foundation
import Postgres
import Storage
import TestSupport
import Testing

/// The task queue's order on a real PostgreSQL: due tasks oldest first, except that the Finish
/// Transaction tasks a peak of deliveries queues never hold back another kind.
@Suite struct TaskClaimTests {
    @Test func otherTasksGoAheadOfQueuedFinishTransactions() async throws {
        try await Fixture.withSchema { pool, _ in
            try await Migrator(pool: pool, logger: Fixture.logger).migrate(Migrator.bundled())
            let store = TaskStore(pool: pool)
            try await pool.transaction { db in
                try await TaskStore.requestFinishTransactions(
                    (1...3).map { ("Sandbox", "100\($0)") }, requestedBy: "test", on: db)
            }
            let requery = try await store.requestRequery(
                environment: "Sandbox", originalTransactionID: "2000", reason: "test", operator: "ops")
            var claimed: [ClaimedTask.Work] = []
            while let task = try await store.claim(owner: "w1", lease: .seconds(60)) { claimed.append(task.work) }
            #expect(requery > 0)
            #expect(
                claimed == [
                    .requery(originalTransactionID: "2000"), .finishTransaction(transactionID: "1001"),
                    .finishTransaction(transactionID: "1002"), .finishTransaction(transactionID: "1003"),
                ])
        }
    }
}
