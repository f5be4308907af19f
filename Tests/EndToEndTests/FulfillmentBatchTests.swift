import Credits
import Domain
import Events
import Foundation
import Postgres
import ServiceRuntime
import Storage
import TestSupport
import Testing

@testable import FulfillmentApp

/// The worker's batches on a real PostgreSQL: events of one chain split into rounds and applied in
/// order, a refusal that stays its event's alone, and a failing batch transaction that falls back
/// to one transaction per event. The events are verified already (the reader has its own tests),
/// so a batch is exactly what the group commit hands to `FulfillmentBatches.apply`.
@Suite(.timeLimit(.minutes(2)))
struct FulfillmentBatchTests {
    static let appKey = "com.example.batch"
    static let product = "com.example.batch.monthly"
    static let owner = "batch-worker"

    @Test func twoEventsOfOneChainAreAppliedInOrderInTwoRounds() async throws {
        try await Fixture.with { fixture in
            let alice = try await fixture.user("alice")
            let bob = try await fixture.user("bob")
            let batch = try await fixture.claim([
                .purchase(original: "7001", transaction: "7001", token: alice, daysAgo: 40),
                .renewal(original: "7001", transaction: "7001001", token: alice, daysAgo: 10),
                .purchase(original: "7002", transaction: "7002", token: bob, daysAgo: 5),
            ])
            #expect(FulfillmentBatches.rounds(batch) == [[0, 2], [1]])

            let results = try await fixture.apply(batch)
            #expect(results.map(\.granted) == [1, 1, 1])
            #expect(try await fixture.count("SELECT count(*) FROM processed_event") == 3)
            #expect(try await fixture.count("SELECT count(*) FROM credit_grant WHERE user_id = 'alice'") == 2)
            #expect(try await fixture.count("SELECT count(*) FROM credit_grant WHERE user_id = 'bob'") == 1)
            // The renewal was planned from the state the purchase wrote: the chain moved to it.
            let last = try await fixture.database.pool.query(
                "SELECT last_transaction_id FROM user_subscription WHERE original_transaction_id = '7001'")
            #expect(try last.first?.decode("last_transaction_id", as: String.self) == "7001001")
            #expect(try await fixture.count("SELECT count(*) FROM apple_transaction") == 3)
            #expect(try await fixture.count("SELECT count(*) FROM inbound_event WHERE kind = 'notification' AND process_status = 'SUCCEEDED'") == 3)
        }
    }

    @Test func anUnmatchedEventIsBuriedAloneWhileTheOthersSucceed() async throws {
        try await Fixture.with { fixture in
            let alice = try await fixture.user("alice")
            let bob = try await fixture.user("bob")
            let batch = try await fixture.claim([
                .purchase(original: "8001", transaction: "8001", token: alice, daysAgo: 3),
                .purchase(original: "8002", transaction: "8002", token: UUID(), daysAgo: 3),
                .purchase(original: "8003", transaction: "8003", token: bob, daysAgo: 3),
            ])
            #expect(FulfillmentBatches.rounds(batch) == [[0, 1, 2]])

            let results = try await fixture.apply(batch)
            #expect(results.map(\.granted) == [1, 0, 1])
            #expect(results[1].verdict == .unmatched(.account))
            let statuses = try await fixture.database.pool.query(
                "SELECT process_status, error_code FROM inbound_event WHERE kind = 'notification' ORDER BY id")
            #expect(try statuses.map { try $0.decode("process_status", as: String.self) } == ["SUCCEEDED", "DEAD", "SUCCEEDED"])
            #expect(try statuses[1].decode("error_code", as: String?.self) == "UNMATCHED_ACCOUNT")
            #expect(try await fixture.count("SELECT count(*) FROM unmatched_fact WHERE transaction_id = '8002'") == 1)
            #expect(try await fixture.count("SELECT count(*) FROM credit_grant") == 2)
            #expect(try await fixture.count("SELECT count(*) FROM processed_event") == 2)
        }
    }

    @Test func aFailingBatchTransactionFallsBackToOneTransactionPerEvent() async throws {
        try await Fixture.with { fixture in
            // Refuses any statement completing more than one event: the batch's write fails, the
            // single-event transactions pass.
            try await fixture.database.pool.query(
                PostgresQuery(
                    unsafeSQL: """
                        CREATE FUNCTION refuse_batches() RETURNS trigger LANGUAGE plpgsql AS $$
                        BEGIN
                            IF (SELECT count(*) FROM completed) > 1 THEN RAISE EXCEPTION 'batch refused by the test'; END IF;
                            RETURN NULL;
                        END $$;
                        CREATE TRIGGER refuse_batches AFTER INSERT ON processed_event REFERENCING NEW TABLE AS completed
                            FOR EACH STATEMENT EXECUTE FUNCTION refuse_batches();
                        """))
            let alice = try await fixture.user("alice")
            let bob = try await fixture.user("bob")
            let carol = try await fixture.user("carol")
            let batch = try await fixture.claim([
                .purchase(original: "9001", transaction: "9001", token: alice, daysAgo: 3),
                .purchase(original: "9002", transaction: "9002", token: bob, daysAgo: 3),
                .purchase(original: "9003", transaction: "9003", token: carol, daysAgo: 3),
            ])
            #expect(FulfillmentBatches.rounds(batch).count == 1)

            let results = try await fixture.apply(batch)
            #expect(results.map(\.granted) == [1, 1, 1])
            #expect(try await fixture.count("SELECT count(*) FROM processed_event") == 3)
            #expect(try await fixture.count("SELECT count(*) FROM credit_grant") == 3)
            #expect(try await fixture.count("SELECT count(*) FROM credit_ledger") == 3)
            #expect(try await fixture.count("SELECT count(*) FROM apple_transaction") == 3)
            #expect(try await fixture.count("SELECT count(*) FROM payment_order WHERE status = 'FULFILLED'") == 3)
            #expect(try await fixture.count("SELECT count(*) FROM inbound_event WHERE kind = 'notification' AND process_status = 'SUCCEEDED'") == 3)
        }
    }

    /// The finding's renewal: a grant to a user whose pool is at the maximum failed with SQLSTATE
    /// 22003 and was retried as if transient. It fails alone, is set aside at once with its code,
    /// and books nothing.
    @Test func aGrantPastTheMaximumBalanceFailsItsEventAloneAndIsNotRetried() async throws {
        try await Fixture.with(limits: CreditLimits(maxBalanceCredits: 1_500)) { fixture in
            let alice = try await fixture.user("alice")
            let bob = try await fixture.user("bob")
            try await fixture.database.pool.query(
                "INSERT INTO credit_account (user_id, pool, balance) VALUES ('alice', 'SUBSCRIPTION', 0)")
            try await fixture.database.pool.query(
                """
                WITH lot AS (INSERT INTO credit_grant (grant_key, user_id, pool, amount, remaining, reason)
                             VALUES ('earlier', 'alice', 'SUBSCRIPTION', 1000000000, 1000000000, 'TEST') RETURNING amount)
                UPDATE credit_account SET balance = (SELECT amount FROM lot) WHERE user_id = 'alice'
                """)
            let batch = try await fixture.claim([
                .purchase(original: "9501", transaction: "9501", token: alice, daysAgo: 2),
                .purchase(original: "9502", transaction: "9502", token: bob, daysAgo: 2),
            ])
            let results = await FulfillmentBatches.apply(
                batch, store: fixture.store, owner: FulfillmentBatchTests.owner, logger: fixture.logger)
            guard case .failure(let error) = results[0], case .success(.done(_, let granted)) = results[1] else {
                Issue.record("expected alice's event to fail and bob's to commit: \(results)")
                return
            }
            #expect(granted == 1)
            #expect(error as? CreditLimitExceeded == CreditLimitExceeded(pools: [UserPool(user: "alice", pool: .subscription)]))
            guard case .permanent(let code, _) = EventProcessor.failure(for: error) else {
                Issue.record("a grant past the maximum must not be retried")
                return
            }
            #expect(code == "AMOUNT_OUT_OF_RANGE")
            #expect(try await fixture.count("SELECT count(*) FROM credit_grant WHERE user_id = 'alice'") == 1, "nothing booked")
            #expect(try await fixture.count("SELECT count(*) FROM credit_account WHERE user_id = 'alice' AND balance = 1000000000") == 1)
            #expect(try await fixture.count("SELECT count(*) FROM user_subscription WHERE user_id = 'alice'") == 0, "rolled back whole")
            // A value a column cannot hold is the same every time too.
            let outOfRange = PostgresError.server(sqlState: "22003", message: "bigint out of range", constraint: nil)
            guard case .permanent(let dataCode, _) = EventProcessor.failure(for: outOfRange) else {
                Issue.record("SQLSTATE 22003 must not be retried")
                return
            }
            #expect(dataCode == "DATA_OUT_OF_RANGE")
            guard case .retryable = EventProcessor.failure(for: PostgresError.connectionFailed("gone")) else {
                Issue.record("losing the database is retried")
                return
            }
        }
    }

    @Test func anEventWhoseLeaseWasLostDropsOutOfTheBatch() async throws {
        try await Fixture.with { fixture in
            let alice = try await fixture.user("alice")
            let bob = try await fixture.user("bob")
            let batch = try await fixture.claim([
                .purchase(original: "6001", transaction: "6001", token: alice, daysAgo: 3),
                .purchase(original: "6002", transaction: "6002", token: bob, daysAgo: 3),
            ])
            try await fixture.database.pool.query(
                "UPDATE inbound_event SET lease_owner = 'another-worker' WHERE id = \(batch[1].event.id)")

            let outcomes = try await FulfillmentBatches.apply(batch, store: fixture.store, owner: Self.owner, logger: fixture.logger)
                .map { try $0.get() }
            guard case .done = outcomes[0], case .leaseLost = outcomes[1] else {
                Issue.record("expected done then leaseLost, got \(outcomes)")
                return
            }
            #expect(try await fixture.count("SELECT count(*) FROM processed_event") == 1)
            #expect(try await fixture.count("SELECT count(*) FROM credit_grant WHERE user_id = 'bob'") == 0)
        }
    }
}

/// What a test reads of an applied event.
struct Applied {
    var verdict: FulfillmentVerdict
    var granted: Int
}

/// A fact to store as a notification and hand over verified.
struct Fact {
    var type: String
    var subtype: String?
    var transaction: TransactionRecord
    var renewal: RenewalFact

    static func purchase(original: String, transaction: String, token: UUID, daysAgo: Double) -> Fact {
        fact("SUBSCRIBED", "INITIAL_BUY", original: original, transaction: transaction, token: token, daysAgo: daysAgo)
    }

    static func renewal(original: String, transaction: String, token: UUID, daysAgo: Double) -> Fact {
        fact("DID_RENEW", nil, original: original, transaction: transaction, token: token, daysAgo: daysAgo)
    }

    static func fact(
        _ type: String, _ subtype: String?, original: String, transaction: String, token: UUID, daysAgo: Double,
        product: String = FulfillmentBatchTests.product
    ) -> Fact {
        let purchased = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 - daysAgo * 86_400).rounded())
        let fact = TransactionFact(
            environment: "Sandbox", transactionID: transaction, originalTransactionID: original,
            productID: product, purchaseDate: purchased, originalPurchaseDate: purchased,
            expiresDate: purchased + 30 * 86_400, transactionReason: subtype == nil ? "RENEWAL" : "PURCHASE",
            appAccountToken: token.uuidString.lowercased(), signedDate: purchased)
        return Fact(
            type: type, subtype: subtype,
            transaction: TransactionRecord(fact: fact, payloadHash: "hash-" + transaction, appAccountTokenUUID: token),
            renewal: RenewalFact(
                environment: "Sandbox", originalTransactionID: original, productID: product,
                autoRenewProductID: product, autoRenewEnabled: true, signedDate: purchased))
    }

    /// Apple's REFUND of this fact's transaction (`percentage`: a prorated share in milliunits), signed `signed`.
    func refund(percentage: Int? = nil, signed: Date = Date() - 60) -> Fact {
        var refund = self
        refund.type = "REFUND"
        refund.subtype = nil
        refund.transaction.fact.revocationDate = signed
        refund.transaction.fact.revocationPercentage = percentage
        refund.transaction.fact.signedDate = signed
        refund.transaction.revocationType = percentage == nil ? "REFUND_FULL" : "REFUND_PRORATED"
        refund.renewal.signedDate = signed
        return refund
    }

    /// Apple's REFUND_REVERSED: the transaction signed again, without its revocation.
    func reversal(signed: Date = Date() - 30) -> Fact {
        var reversal = self
        reversal.type = "REFUND_REVERSED"
        reversal.subtype = nil
        reversal.transaction.fact.revocationDate = nil
        reversal.transaction.fact.revocationPercentage = nil
        reversal.transaction.fact.signedDate = signed
        reversal.transaction.revocationType = nil
        reversal.renewal.signedDate = signed
        return reversal
    }
}

/// A migrated database with the catalogue, and the store a worker would use on it.
struct Fixture {
    let database: TestDatabase
    let events: EventStore
    let store: FulfillmentStore
    let logger = Logger(label: "test", level: .warning)

    /// Runs `body` with a fixture of its own, whose database is dropped after it (also on throw).
    static func with(limits: CreditLimits = CreditLimits(), _ body: (Fixture) async throws -> Void) async throws {
        try await withTestDatabase("batch") { database in
            try await database.pool.query(
                """
                INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount)
                VALUES (\(FulfillmentBatchTests.appKey), \(FulfillmentBatchTests.product), '21000000', 'starter', 2, 'P1M', 1000)
                """)
            let events = EventStore(pool: database.pool, topic: "unused")
            try await body(
                Fixture(
                    database: database, events: events,
                    store: FulfillmentStore(
                        leases: events, appKey: FulfillmentBatchTests.appKey, everyoneIsTestUser: true, topic: "unused",
                        creditLimits: limits)))
        }
    }

    func user(_ id: String) async throws -> UUID {
        let token = UUID()
        try await database.pool.query("INSERT INTO app_user (user_id) VALUES (\(id))")
        try await database.pool.query("INSERT INTO user_account_token (user_id, app_account_token) VALUES (\(id), \(token))")
        return token
    }

    /// Stores the facts as notifications and claims them all in one batch claim.
    func claim(_ facts: [Fact]) async throws -> [PendingEvent] {
        var envelopes: [EventEnvelope] = []
        for fact in facts {
            let stored = try await events.insertNotification(
                NewNotificationEvent(
                    notificationUUID: UUID().uuidString, notificationType: fact.type, subtype: fact.subtype,
                    environment: "Sandbox", transactionID: fact.transaction.fact.transactionID,
                    originalTransactionID: fact.transaction.fact.originalTransactionID,
                    routingKey: fact.transaction.fact.originalTransactionID))
            envelopes.append(EventEnvelope(kind: .notification, eventID: stored.eventID, traceID: nil))
        }
        let claimed = try await events.claim(envelopes, owner: FulfillmentBatchTests.owner, lease: .seconds(60))
        return try zip(facts, claimed).map { fact, event in
            PendingEvent(
                event: try #require(event),
                verified: VerifiedEvent(
                    source: .notification(type: fact.type, subtype: fact.subtype), transaction: fact.transaction,
                    renewal: fact.renewal),
                now: Date())
        }
    }

    /// Applies the batch as the group commit would; every event must end committed.
    func apply(_ batch: [PendingEvent]) async throws -> [Applied] {
        try await FulfillmentBatches.apply(batch, store: store, owner: FulfillmentBatchTests.owner, logger: logger).map {
            guard case .done(let plan, let granted) = try $0.get() else { throw LeaseLost() }
            return Applied(verdict: plan.verdict, granted: granted)
        }
    }

    func count(_ sql: String) async throws -> Int { try await database.count(sql) }
}

private struct LeaseLost: Error {}
