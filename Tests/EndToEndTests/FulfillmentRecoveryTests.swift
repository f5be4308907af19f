import AppStore
import AppStoreTestSupport
import Foundation
import Postgres
import TestSupport
import Testing

/// What happens when a fact cannot be applied now: unmatched facts kept and replayed, retryable
/// failures retried with backoff until the attempts run out, permanent ones buried at once, and
/// Sandbox facts kept away from real users.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct FulfillmentRecoveryTests {
    static func id() -> String { String(UInt64.random(in: 2_000_000_000_000_000...2_999_999_999_999_999)) }

    /// Scenario 21: an unknown product or an unknown appAccountToken is UNMATCHED, kept with its
    /// summary; after the catalogue or the user is fixed, a replay fulfils it.
    @Test func unmatchedFactsAreKeptAndReplayedAfterTheFix() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        let token = try await harness.user("alice")
        let id = Self.id()
        let purchase = harness.transaction(id, product: "com.example.max.monthly", token: token)
        let uuid = try await harness.notify(.subscribed, .initialBuy, transaction: purchase)
        #expect(try await harness.outcome(of: uuid) == .dead("UNMATCHED_PRODUCT"))
        #expect(
            try await harness.value(
                "SELECT reason || ':' || product_id || ':' || app_account_token FROM unmatched_fact WHERE transaction_id = \(id)",
                as: String.self) == "UNMATCHED_PRODUCT:com.example.max.monthly:\(token.uuidString.lowercased())")
        #expect(try await harness.count("SELECT count(*) FROM apple_transaction") == 0)
        #expect(try await harness.metric(#"subs_fulfillment_unmatched_total{reason="UNMATCHED_PRODUCT"}"#, reaching: 1) == 1)

        let stranger = UUID()
        let orphan = Self.id()
        let unknownUser = try await harness.notify(.subscribed, .initialBuy, transaction: harness.transaction(orphan, token: stranger))
        #expect(try await harness.outcome(of: unknownUser) == .dead("UNMATCHED_ACCOUNT"))
        let noToken = try await harness.notify(.subscribed, .initialBuy, transaction: harness.transaction(Self.id(), token: nil))
        #expect(try await harness.outcome(of: noToken) == .dead("UNMATCHED_ACCOUNT"))

        try await harness.addProduct("com.example.max.monthly", level: 1, credits: 5000)
        let replay = try await harness.subsctl(["replay", "--error-code", "UNMATCHED_PRODUCT", "--operator", "e2e", "--reason", "product added"])
        #expect(replay.status == 0, "\(replay.output)")
        #expect(replay.output.contains("replayed=1 errorCode=UNMATCHED_PRODUCT"), "\(replay.output)")
        #expect(
            try await harness.count(
                "SELECT count(*) FROM audit_log WHERE action = 'DEAD_EVENTS_REPLAYED' AND operator = 'e2e' AND after ->> 'replayed' = '1'") == 1)
        #expect(try await harness.outcome(of: uuid, timeout: 30) == .succeeded)
        #expect(try await harness.subscription(id)?.status == "ACTIVE")
        #expect(try await harness.balance("alice") == 5000)
        #expect(
            try await harness.value(
                "SELECT replayed_at IS NOT NULL FROM unmatched_fact WHERE transaction_id = \(id)", as: Bool.self) == true)

        // The user behind the stranger's token signs up; the other one stays unmatched (never guessed).
        try await harness.pool.query("INSERT INTO app_user (user_id) VALUES ('late')")
        try await harness.pool.query("INSERT INTO user_account_token (user_id, app_account_token) VALUES ('late', \(stranger))")
        #expect(try await harness.value("SELECT replay_dead_events('UNMATCHED_ACCOUNT')", as: Int.self) == 2)
        #expect(try await harness.outcome(of: unknownUser, timeout: 30) == .succeeded)
        #expect(try await harness.outcome(of: noToken, timeout: 30) == .dead("UNMATCHED_ACCOUNT"))
        #expect(try await harness.balance("late") == 1000)
        #expect(try await harness.count("SELECT count(*) FROM unmatched_fact WHERE replayed_at IS NULL") == 1)
        try await harness.checkInvariants()
    }

    /// Retryable failures wait with backoff and succeed once the cause is gone; after
    /// FULFILLMENT_MAX_ATTEMPTS they are DEAD. A nested JWS that does not verify is DEAD at once.
    @Test func retriesThenDeadAndPermanentFailuresAtOnce() async throws {
        let harness = try await WorkerHarness.start(extra: [
            "FULFILLMENT_MAX_ATTEMPTS": "3", "FULFILLMENT_RETRY_BASE_MS": "100", "FULFILLMENT_RETRY_MAX_MS": "300",
        ])
        defer { harness.stop() }
        let token = try await harness.user("alice")
        // The database refuses to store transactions of the products listed here, as a failing
        // database would (40001 is a serialization failure: retryable).
        try await harness.pool.query(
            PostgresQuery(
                unsafeSQL: """
                    CREATE TABLE test_failing_product (product_id text PRIMARY KEY);
                    CREATE FUNCTION test_fail() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN
                        IF EXISTS (SELECT 1 FROM test_failing_product WHERE product_id = NEW.product_id) THEN
                            RAISE EXCEPTION 'injected failure' USING ERRCODE = '40001';
                        END IF;
                        RETURN NEW;
                    END $$;
                    CREATE TRIGGER test_fail BEFORE INSERT OR UPDATE ON apple_transaction
                        FOR EACH ROW EXECUTE FUNCTION test_fail();
                    """))
        try await harness.pool.query("INSERT INTO test_failing_product VALUES (\(WorkerHarness.starter)), (\(WorkerHarness.pro))")

        let recovering = try await harness.notify(.subscribed, .initialBuy, transaction: harness.transaction(Self.id(), token: token))
        let waited = try await eventually(timeout: 30) {
            try await harness.value(
                "SELECT process_status || ':' || error_code FROM inbound_event WHERE kind = 'notification' AND notification_uuid = \(recovering)",
                as: String.self) == "RETRY_WAIT:RETRYABLE_DATABASE"
        }
        #expect(waited)
        try await harness.pool.query("DELETE FROM test_failing_product WHERE product_id = \(WorkerHarness.starter)")
        #expect(try await harness.outcome(of: recovering, timeout: 60) == .succeeded)
        #expect(try await harness.balance("alice") == 1000)

        let hopeless = try await harness.notify(
            .subscribed, .initialBuy, transaction: harness.transaction(Self.id(), product: WorkerHarness.pro, token: token))
        #expect(try await harness.outcome(of: hopeless, timeout: 60) == .dead("RETRYABLE_DATABASE"))
        #expect(
            try await harness.value(
                "SELECT retry_count FROM inbound_event WHERE kind = 'notification' AND notification_uuid = \(hopeless)", as: Int.self) == 3)

        // A nested transaction signed by someone else: the outer signature is ours, the fact is not.
        let stranger = try TestAppleSigner()
        var payload = ResponseBodyV2DecodedPayload()
        payload.notificationType = .subscribed
        payload.subtype = .initialBuy
        payload.notificationUUID = UUID().uuidString.lowercased()
        payload.signedDate = TestPayloads.wholeMilliseconds(Date())
        var data = NotificationData()
        data.bundleId = IngressHarness.bundleID
        data.environment = .sandbox
        data.signedTransactionInfo = try stranger.sign(harness.transaction(Self.id(), token: token))
        payload.data = data
        let forged = try await harness.client.post(
            "/api/v1/iap/apple/notifications/sandbox", json: ["signedPayload": try harness.signer.sign(payload)])
        #expect(forged.status == 200)
        #expect(try await harness.outcome(of: payload.notificationUUID!) == .dead("INVALID_CHAIN"))
        #expect(
            try await harness.value(
                "SELECT retry_count FROM inbound_event WHERE kind = 'notification' AND notification_uuid = \(payload.notificationUUID!)",
                as: Int.self) == 1, "a permanent failure is not retried")
        #expect(try await harness.count("SELECT count(*) FROM credit_grant") == 1)
        try await harness.checkInvariants()
    }

    /// Scenario 29: on a Production deployment a Sandbox fact only touches users flagged as test users.
    @Test func sandboxFactsOnlyTouchTestUsersInProduction() async throws {
        let harness = try await WorkerHarness.start(environment: .production)
        defer { harness.stop() }
        let alice = try await harness.user("alice")
        let tester = try await harness.user("tess")
        // The operator flags the tester (domain.md: through subsctl), with an audit row.
        let flag = try await harness.subsctl(
            ["test-user", "--user-id", "tess", "--enable", "true", "--operator", "e2e", "--reason", "TestFlight tester"])
        #expect(flag.status == 0, "\(flag.output)")
        #expect(flag.output.contains("user=tess testUser=true (was false)"), "\(flag.output)")
        #expect(
            try await harness.count(
                "SELECT count(*) FROM audit_log WHERE action = 'TEST_USER_FLAGGED' AND operator = 'e2e' AND after ->> 'isTestUser' = 'true'") == 1)

        let sandboxForAlice = try await harness.notify(
            .subscribed, .initialBuy, transaction: harness.transaction(Self.id(), token: alice))
        #expect(try await harness.outcome(of: sandboxForAlice) == .dead("SANDBOX_REFUSED"))
        #expect(try await harness.metric(#"subs_fulfillment_dead_total{code="SANDBOX_REFUSED"}"#, reaching: 1) == 1)
        let sandboxForTess = try await harness.notify(
            .subscribed, .initialBuy, transaction: harness.transaction(Self.id(), token: tester))
        #expect(try await harness.outcome(of: sandboxForTess) == .succeeded)
        let production = Self.id()
        let realPurchase = try await harness.notify(
            .subscribed, .initialBuy, transaction: harness.transaction(production, token: alice, environment: .production),
            environment: .production)
        #expect(try await harness.outcome(of: realPurchase) == .succeeded)
        #expect(try await harness.subscription(production, environment: "Production")?.status == "ACTIVE")
        #expect(try await harness.balance("alice") == 1000)
        #expect(try await harness.balance("tess") == 1000)
        #expect(try await harness.count("SELECT count(*) FROM user_subscription WHERE user_id = 'alice'") == 1)
        try await harness.checkInvariants()
    }
}
