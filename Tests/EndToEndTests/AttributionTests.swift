import AppStore
import AppStoreTestSupport
import Foundation
import Postgres
import TestSupport
import Testing

/// Paid facts that no token attributes: a purchase made outside the app's account flow, bound by an
/// operator (`subsctl chain attribute`, Set App Account Token at Apple's mock), and a family
/// member's shared access, bound by the member's own upload. Each writes one grant per paid period.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct AttributionTests {
    static func id() -> String { String(UInt64.random(in: 2_000_000_000_000_000...2_999_999_999_999_999)) }

    @Test func anOperatorAttributesATokenlessPurchaseWhichThenGrantsOnce() async throws {
        let harness = try await SchedulerHarness.start()
        defer { harness.stop() }
        let pair = harness.pair
        let bobsToken = try await pair.user("bob")
        try await pair.user("alice")
        let id = Self.id()
        // Redeemed with an offer code in the App Store: Apple's transaction carries no token.
        let purchase = pair.transaction(id, purchase: Date() - 60, token: nil)
        try harness.mock.addTransaction(purchase)
        let subscribed = try await pair.notify(.subscribed, .initialBuy, transaction: purchase)
        #expect(try await pair.outcome(of: subscribed) == .dead("UNMATCHED_ACCOUNT"))

        let missingReason = try await harness.subsctl(["chain", "attribute", "--original-transaction-id", id, "--user-id", "bob"])
        #expect(missingReason.status == 64, "\(missingReason.output)")
        let attributed = try await harness.subsctl([
            "chain", "attribute", "--original-transaction-id", id, "--user-id", "bob", "--reason", "support ticket 7",
            "--operator", "ops",
        ])
        #expect(attributed.status == 0, "\(attributed.output)")
        #expect(attributed.output.contains("chain=Sandbox:\(id) userId=bob source=OPERATOR appAccountToken=PENDING"))
        #expect(attributed.output.contains("replayed=1 changed=true"))
        #expect(try await pair.outcome(of: subscribed) == .succeeded)
        #expect(try await pair.balance("bob") == 1000)
        #expect(try await pair.subscription(id)?.status == "ACTIVE")

        // The worker set Bob's token on the chain at Apple, and kept the outcome.
        let set = try await eventually(timeout: 30) {
            try await pair.value(
                "SELECT apple_token_status FROM chain_binding WHERE original_transaction_id = \(id)", as: String.self) == "SET"
        }
        #expect(set)
        #expect(harness.mock.appAccountToken(for: id) == bobsToken)
        #expect(try await pair.count("SELECT count(*) FROM audit_log WHERE action = 'CHAIN_ATTRIBUTED' AND operator = 'ops'") == 1)

        // Again: nothing new. Alice cannot have it: another user's chain.
        let again = try await harness.subsctl([
            "chain", "attribute", "--original-transaction-id", id, "--user-id", "bob", "--reason", "retry",
        ])
        #expect(again.status == 0, "\(again.output)")
        #expect(again.output.contains("replayed=0 changed=false"))
        let alices = try await harness.subsctl([
            "chain", "attribute", "--original-transaction-id", id, "--user-id", "alice", "--reason", "wrong ticket",
        ])
        #expect(alices.status == 1)
        #expect(alices.output.contains("error=ACCOUNT_CONFLICT"))
        let unknown = try await harness.subsctl([
            "chain", "attribute", "--original-transaction-id", "1999", "--user-id", "bob", "--reason", "typo",
        ])
        #expect(unknown.status == 66)
        #expect(unknown.output.contains("error=CHAIN_NOT_FOUND"))

        // The next renewal, still without a token, follows the binding: one more grant.
        let renewal = pair.transaction(Self.id(), original: id, purchase: Date(), token: nil, reason: .renewal)
        #expect(try await pair.outcome(of: try await pair.notify(.didRenew, transaction: renewal)) == .succeeded)
        #expect(try await pair.balance("bob") == 2000)
        #expect(try await pair.balance("alice") == 0)
        try await pair.checkInvariants()
    }

    @Test func aFamilyMemberBindsTheirSharedAccessByUploadingIt() async throws {
        let harness = try await SchedulerHarness.start()
        defer { harness.stop() }
        let pair = harness.pair
        try await pair.user("carol")
        try await pair.user("dave")
        let id = Self.id()
        // The member's own transaction for the purchaser's subscription: Apple puts no token on it.
        var shared = pair.transaction(id, purchase: Date() - 60, token: nil)
        shared.rawInAppOwnershipType = InAppOwnershipType.familyShared.rawValue
        try harness.mock.addTransaction(shared)
        let subscribed = try await pair.notify(.subscribed, .initialBuy, transaction: shared)
        #expect(try await pair.outcome(of: subscribed) == .dead("UNMATCHED_ACCOUNT"))

        // Carol's app sees it in Transaction.updates and uploads it: it is hers now.
        let upload = try await pair.submit(try pair.signer.sign(shared), orderNo: nil, as: "carol")
        #expect(upload.status == 200, "\(upload.text)")
        let result = try upload.json()
        #expect(result["fulfilled"] as? Bool == true)
        #expect(result["subscriptionStatus"] as? String == "ACTIVE")
        #expect(result["transactionId"] as? String == id)
        #expect(try await pair.outcome(of: subscribed) == .succeeded, "the waiting notification is replayed on binding")
        #expect(try await pair.value("SELECT user_id FROM chain_binding WHERE original_transaction_id = \(id)", as: String.self) == "carol")
        #expect(try await pair.count("SELECT count(*) FROM payment_order WHERE original_transaction_id = \(id)") == 0)
        #expect(try await pair.count("SELECT count(*) FROM credit_grant WHERE original_transaction_id = \(id)") == 0)

        // Dave uploads the same shared access: another account's.
        let daves = try await pair.submit(try pair.signer.sign(shared), orderNo: nil, as: "dave")
        #expect(daves.status == 409)
        #expect(try daves.json()["code"] as? String == "ACCOUNT_CONFLICT")
        #expect(try await pair.subscription(id)?.frozenReason == nil)

        // Apple refuses a token on family transactions; the binding alone keeps attributing.
        let attributed = try await harness.subsctl([
            "chain", "attribute", "--original-transaction-id", id, "--user-id", "carol", "--reason", "check",
        ])
        #expect(attributed.output.contains("changed=false"), "\(attributed.output)")

        // The purchaser stops sharing: REVOKE of the member's transaction ends Carol's access only.
        var revoked = shared
        revoked.revocationDate = TestPayloads.wholeMilliseconds(Date())
        revoked.signedDate = TestPayloads.wholeMilliseconds(Date())
        #expect(try await pair.outcome(of: try await pair.notify(.revoke, transaction: revoked)) == .succeeded)
        #expect(try await pair.subscription(id)?.status == "REVOKED")
        try await pair.checkInvariants()
    }

    /// A token-less purchase (made where the app set no token) by an Apple Account that bought for
    /// one user here is that user's: applied, audited with its method, counted once. An Apple
    /// Account that paid for two users is never guessed between: the purchase waits unmatched as
    /// before, and its event says why.
    @Test func aTokenlessPurchaseFollowsItsAppleAccountToItsOnlyUser() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        let day: TimeInterval = 86_400
        let alicesAccount = Self.id()
        let sharedAccount = Self.id()
        for (user, account) in [("alice", alicesAccount), ("bob", sharedAccount), ("carol", sharedAccount)] {
            let token = try await harness.user(user)
            var earlier = harness.transaction(Self.id(), purchase: Date() - 40 * day, token: token)
            earlier.appTransactionId = account
            #expect(
                try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: earlier))
                    == .succeeded)
        }

        let id = Self.id()
        var purchase = harness.transaction(id, purchase: Date() - 60, token: nil)
        purchase.appTransactionId = alicesAccount
        let subscribed = try await harness.notify(.subscribed, .initialBuy, transaction: purchase)
        #expect(try await harness.outcome(of: subscribed) == .succeeded)
        #expect(try await harness.subscription(id)?.status == "ACTIVE")
        #expect(
            try await harness.value("SELECT user_id FROM user_subscription WHERE original_transaction_id = \(id)", as: String.self)
                == "alice")
        #expect(
            try await harness.count(
                "SELECT count(*) FROM credit_grant WHERE original_transaction_id = \(id) AND user_id = 'alice'") == 1)
        let audited: PostgresQuery = """
            SELECT count(*) FROM audit_log
             WHERE action = 'PURCHASE_ATTRIBUTED' AND after->>'transactionId' = \(id)
               AND after->>'method' = 'app_transaction' AND after->>'userId' = 'alice'
               AND after->>'appTransactionId' = \(alicesAccount)
            """
        #expect(try await harness.count(audited) == 1)
        #expect(try await harness.metric(#"subs_attributions_total{method="app_transaction"}"#, reaching: 1) == 1)

        // Redelivered, and renewed without a token: the chain's owner decides now, nothing more is audited.
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
        var renewal = harness.transaction(Self.id(), original: id, purchase: Date(), token: nil, reason: .renewal)
        renewal.appTransactionId = alicesAccount
        #expect(try await harness.outcome(of: try await harness.notify(.didRenew, transaction: renewal)) == .succeeded)
        #expect(try await harness.count(audited) == 1)
        #expect(try await harness.metric(#"subs_attributions_total{method="subscription_owner"}"#, reaching: 2) == 2)
        #expect(try await harness.metric(#"subs_attributions_total{method="app_transaction"}"#) == 1)

        // The Apple Account that paid for Bob and for Carol: nobody is guessed.
        let ambiguous = Self.id()
        var theirs = harness.transaction(ambiguous, purchase: Date() - 60, token: nil)
        theirs.appTransactionId = sharedAccount
        let unmatched = try await harness.notify(.subscribed, .initialBuy, transaction: theirs)
        #expect(try await harness.outcome(of: unmatched) == .dead("UNMATCHED_ACCOUNT"))
        let why = try await harness.value(
            "SELECT error_message FROM inbound_event WHERE notification_uuid = \(unmatched)", as: String.self)
        #expect(why?.contains("bought for 2 users: not guessed") == true, "\(why ?? "")")
        #expect(try await harness.subscription(ambiguous) == nil)
        #expect(try await harness.count("SELECT count(*) FROM credit_grant WHERE original_transaction_id = \(ambiguous)") == 0)
        #expect(try await harness.count("SELECT count(*) FROM audit_log WHERE after->>'transactionId' = \(ambiguous)") == 0)
        try await harness.checkInvariants()
    }

    /// A token-less purchase signed without `appTransactionId` (before iOS 18.4): the worker asks
    /// Apple's mock (Get App Transaction Info), stores the Apple Account it names, and attributes by
    /// the same one-candidate rule, audited and counted as `app_transaction_lookup`. Two candidates,
    /// or Apple failing, leave the purchase unmatched as before; the apply never fails for it.
    @Test func aPurchaseSignedWithoutItsAppleAccountIsAttributedByAskingApple() async throws {
        let harness = try await SchedulerHarness.start()
        defer { harness.stop() }
        let pair = harness.pair
        let day: TimeInterval = 86_400
        let alicesAccount = Self.id()
        let sharedAccount = Self.id()
        for (user, account) in [("alice", alicesAccount), ("bob", sharedAccount), ("carol", sharedAccount)] {
            let token = try await pair.user(user)
            var earlier = pair.transaction(Self.id(), purchase: Date() - 40 * day, token: token)
            earlier.appTransactionId = account
            #expect(try await pair.outcome(of: try await pair.notify(.subscribed, .initialBuy, transaction: earlier)) == .succeeded)
        }
        /// Apple knows the purchase's Apple Account; the transaction it signed then does not say it.
        func purchase(account: String?) throws -> JWSTransactionDecodedPayload {
            var known = pair.transaction(Self.id(), purchase: Date() - 60, token: nil)
            known.appTransactionId = account
            try harness.mock.addTransaction(known)
            known.appTransactionId = nil
            return known
        }

        let alices = try purchase(account: alicesAccount)
        let id = try #require(alices.transactionId)
        #expect(try await pair.outcome(of: try await pair.notify(.subscribed, .initialBuy, transaction: alices)) == .succeeded)
        #expect(try await pair.value("SELECT user_id FROM user_subscription WHERE original_transaction_id = \(id)", as: String.self) == "alice")
        #expect(
            try await pair.value("SELECT app_transaction_id FROM apple_transaction WHERE transaction_id = \(id)", as: String.self)
                == alicesAccount)
        #expect(
            try await pair.count("SELECT count(*) FROM credit_grant WHERE original_transaction_id = \(id) AND user_id = 'alice'") == 1)
        #expect(
            try await pair.count(
                """
                SELECT count(*) FROM audit_log
                 WHERE action = 'PURCHASE_ATTRIBUTED' AND after->>'transactionId' = \(id)
                   AND after->>'method' = 'app_transaction_lookup' AND after->>'appTransactionId' = \(alicesAccount)
                """) == 1)
        #expect(try await pair.metric(#"subs_attributions_total{method="app_transaction_lookup"}"#, reaching: 1) == 1)
        let lookups = harness.mock.requests.filter { $0.path.hasPrefix("/inApps/v1/transactions/appTransactions/") }
        #expect(lookups.map(\.path) == ["/inApps/v1/transactions/appTransactions/\(id)"], "only the unclaimed token-less purchase")

        // The Apple Account that paid for Bob and for Carol: nobody is guessed.
        let theirs = try purchase(account: sharedAccount)
        let ambiguous = try await pair.notify(.subscribed, .initialBuy, transaction: theirs)
        #expect(try await pair.outcome(of: ambiguous) == .dead("UNMATCHED_ACCOUNT"))
        let why = try await pair.value("SELECT error_message FROM inbound_event WHERE notification_uuid = \(ambiguous)", as: String.self)
        #expect(why?.contains("bought for 2 users: not guessed") == true, "\(why ?? "")")

        // Apple fails (every try of the lookup's one call): unmatched as before, never guessed.
        let failing = try purchase(account: alicesAccount)
        let path = "/inApps/v1/transactions/appTransactions/\(failing.transactionId!)"
        harness.mock.enqueue(.init(status: 503, pathPrefix: path), .init(status: 503, pathPrefix: path))
        let failed = try await pair.notify(.subscribed, .initialBuy, transaction: failing)
        #expect(try await pair.outcome(of: failed) == .dead("UNMATCHED_ACCOUNT"))
        #expect(try await pair.subscription(failing.transactionId!) == nil)
        #expect(try await pair.metric(#"subs_app_transaction_lookups_total{outcome="apple_error"}"#, reaching: 1) == 1)
        #expect(try await pair.metric(#"subs_attributions_total{method="app_transaction_lookup"}"#) == 1)
        #expect(try await pair.count("SELECT count(*) FROM credit_grant WHERE original_transaction_id = \(failing.transactionId!)") == 0)
        try await pair.checkInvariants()
    }

    @Test func setAppAccountTokenOnAFamilyChainKeepsApplesRefusal() async throws {
        let harness = try await SchedulerHarness.start()
        defer { harness.stop() }
        let pair = harness.pair
        try await pair.user("erin")
        let id = Self.id()
        var shared = pair.transaction(id, purchase: Date() - 60, token: nil)
        shared.rawInAppOwnershipType = InAppOwnershipType.familyShared.rawValue
        try harness.mock.addTransaction(shared)
        let subscribed = try await pair.notify(.subscribed, .initialBuy, transaction: shared)
        #expect(try await pair.outcome(of: subscribed) == .dead("UNMATCHED_ACCOUNT"))
        let attributed = try await harness.subsctl([
            "chain", "attribute", "--original-transaction-id", id, "--user-id", "erin", "--reason", "member without the app",
        ])
        #expect(attributed.status == 0, "\(attributed.output)")
        #expect(try await pair.outcome(of: subscribed) == .succeeded)
        let refused = try await eventually(timeout: 30) {
            try await pair.value(
                "SELECT apple_token_status FROM chain_binding WHERE original_transaction_id = \(id)", as: String.self)
                == "FAMILY_NOT_SUPPORTED"
        }
        #expect(refused)
        #expect(harness.mock.appAccountToken(for: id) == nil)
        #expect(
            try await pair.value(
                "SELECT status FROM fulfillment_task WHERE kind = 'SET_APP_ACCOUNT_TOKEN' AND original_transaction_id = \(id)",
                as: String.self) == "DONE")
        #expect(try await pair.subscription(id)?.status == "ACTIVE")
    }
}
