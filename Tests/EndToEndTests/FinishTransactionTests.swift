import AppStore
import AppStoreTestSupport
import Foundation
import Postgres
import Storage
import TestSupport
import Testing

/// Finish Transaction (`APPLE_FINISH_TRANSACTIONS`): every transaction a worker delivers is
/// reported to Apple's mock once, after the commit, as a task; Apple's failures retry or end it,
/// and a revoked transaction or a setting left off reports nothing.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct FinishTransactionTests {
    static func id() -> String { String(UInt64.random(in: 2_000_000_000_000_000...2_999_999_999_999_999)) }

    /// The requests Apple's mock saw for one transaction's Finish Transaction.
    static func finishRequests(_ mock: MockAppStoreServerAPI, _ transactionID: String) -> Int {
        mock.requests.filter { $0.method == "POST" && $0.path == "/inApps/v1/transactions/\(transactionID)/finish" }.count
    }

    static func task(_ transactionID: String) -> PostgresQuery {
        "SELECT status FROM fulfillment_task WHERE kind = 'FINISH_TRANSACTION' AND transaction_id = \(transactionID)"
    }

    @Test func deliveredTransactionsAreFinishedOnceAfterTheirCommit() async throws {
        let harness = try await SchedulerHarness.start(extra: ["APPLE_FINISH_TRANSACTIONS": "true"])
        defer { harness.stop() }
        let pair = harness.pair
        let token = try await pair.user("alice")
        let id = Self.id()
        let purchase = pair.transaction(id, purchase: Date() - 60, token: token)
        try harness.mock.addTransaction(purchase)
        #expect(try await pair.outcome(of: try await pair.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
        #expect(try await eventually(timeout: 30) { harness.mock.finishedTransactions == [id] })

        // Apple answers 500 once: the call is retried and the renewal is finished.
        let renewalID = Self.id()
        let renewal = pair.transaction(renewalID, original: id, purchase: Date(), token: token, reason: .renewal)
        try harness.mock.addTransaction(renewal)
        harness.mock.enqueue(.init(status: 500, pathPrefix: "/inApps/v1/transactions/\(renewalID)/finish"))
        #expect(try await pair.outcome(of: try await pair.notify(.didRenew, transaction: renewal)) == .succeeded)
        #expect(try await eventually(timeout: 30) { harness.mock.finishedTransactions == [id, renewalID] })
        #expect(Self.finishRequests(harness.mock, renewalID) == 2)

        // Redelivered and then refunded: nothing more is asked of Apple.
        #expect(try await pair.outcome(of: try await pair.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
        var refunded = renewal
        refunded.revocationDate = TestPayloads.wholeMilliseconds(Date())
        refunded.signedDate = TestPayloads.wholeMilliseconds(Date())
        #expect(try await pair.outcome(of: try await pair.notify(.refund, transaction: refunded)) == .succeeded)
        #expect(try await pair.count("SELECT count(*) FROM fulfillment_task WHERE kind = 'FINISH_TRANSACTION'") == 2)
        #expect(
            try await pair.count(
                "SELECT count(*) FROM fulfillment_task WHERE kind = 'FINISH_TRANSACTION' AND status = 'DONE' AND attempts = 1") == 2)

        // A consumable (a credit pack, ONE_TIME_CHARGE) is delivered and finished the same way.
        let pack = "com.example.pack500"
        try await pair.pool.query(
            """
            INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount,
                                         kind, permanent_credits)
            VALUES (\(IngressHarness.bundleID), \(pack), '', 'pack500', 1, 'P1M', 0, 'CONSUMABLE', 500)
            """)
        let packID = Self.id()
        var charge = pair.transaction(packID, product: pack, purchase: Date() - 60, token: token)
        charge.expiresDate = nil
        charge.type = .consumable
        charge.subscriptionGroupIdentifier = nil
        try harness.mock.addTransaction(charge)
        #expect(try await pair.outcome(of: try await pair.notify(.oneTimeCharge, transaction: charge)) == .succeeded)
        #expect(try await eventually(timeout: 30) { harness.mock.finishedTransactions == [id, renewalID, packID] })

        // A transaction Apple does not know (404): recorded on the task, asked once.
        let unknownID = Self.id()
        let unknown = pair.transaction(unknownID, purchase: Date() - 60, token: try await pair.user("carol"))
        #expect(try await pair.outcome(of: try await pair.notify(.subscribed, .initialBuy, transaction: unknown)) == .succeeded)
        #expect(try await eventually(timeout: 30) { try await pair.value(Self.task(unknownID), as: String.self) == "DONE" })
        #expect(
            try await pair.value(
                "SELECT result->>'outcome' FROM fulfillment_task WHERE transaction_id = \(unknownID)", as: String.self)
                == "TRANSACTION_NOT_FOUND")
        #expect(Self.finishRequests(harness.mock, unknownID) == 1)

        // Apple refuses it for good (400 with an Apple code): FAILED at once, audited, counted.
        let refusedID = Self.id()
        let refused = pair.transaction(refusedID, purchase: Date() - 60, token: try await pair.user("dave"))
        try harness.mock.addTransaction(refused)
        harness.mock.enqueue(
            .init(status: 400, errorCode: 4_000_006, pathPrefix: "/inApps/v1/transactions/\(refusedID)/finish"))
        #expect(try await pair.outcome(of: try await pair.notify(.subscribed, .initialBuy, transaction: refused)) == .succeeded)
        #expect(try await eventually(timeout: 30) { try await pair.value(Self.task(refusedID), as: String.self) == "FAILED" })
        #expect(Self.finishRequests(harness.mock, refusedID) == 1)
        // The audit row follows the task's FAILED in a transaction of its own: wait for it.
        #expect(
            try await eventually(timeout: 30) {
                try await pair.count(
                    """
                    SELECT count(*) FROM audit_log
                     WHERE action = 'FINISH_TRANSACTION_FAILED' AND after->>'transaction_id' = \(refusedID)
                    """) == 1
            })
        #expect(try await pair.metric(#"subs_apple_finish_transactions_total{outcome="finished"}"#, reaching: 3) == 3)
        #expect(try await pair.metric(#"subs_apple_finish_transactions_total{outcome="not_found"}"#, reaching: 1) == 1)
        #expect(try await pair.metric(#"subs_apple_finish_transactions_total{outcome="failed"}"#, reaching: 1) == 1)
        // Finished tasks are deleted after their keeping time; the FAILED one stays for an operator.
        try await pair.pool.query(
            """
            UPDATE fulfillment_task SET completed_at = now() - interval '31 days'
             WHERE kind = 'FINISH_TRANSACTION' AND transaction_id = ANY(\(PostgresArray([id, refusedID]))::text[])
            """)
        #expect(try await TaskStore(pool: pair.pool).deleteFinishedTransactions(olderThanDays: 30) == 1)
        #expect(try await pair.value(Self.task(id), as: String.self) == nil)
        #expect(try await pair.value(Self.task(refusedID), as: String.self) == "FAILED")
        #expect(try await pair.value(Self.task(renewalID), as: String.self) == "DONE")
        // The fulfilment itself never waited on Apple's answers: both purchases are delivered.
        #expect(try await pair.balance("carol") == 1000)
        #expect(try await pair.balance("dave") == 1000)
        try await pair.checkInvariants()
    }

    @Test func nothingIsFinishedWithTheSettingOff() async throws {
        let harness = try await SchedulerHarness.start()
        defer { harness.stop() }
        let pair = harness.pair
        let token = try await pair.user("bob")
        let id = Self.id()
        let purchase = pair.transaction(id, purchase: Date() - 60, token: token)
        try harness.mock.addTransaction(purchase)
        #expect(try await pair.outcome(of: try await pair.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
        #expect(try await pair.balance("bob") == 1000)
        // The task would have committed with the delivery: none was written, so none can run.
        #expect(try await pair.count("SELECT count(*) FROM fulfillment_task WHERE kind = 'FINISH_TRANSACTION'") == 0)
        #expect(harness.mock.finishedTransactions.isEmpty)
        #expect(Self.finishRequests(harness.mock, id) == 0)
    }
}
