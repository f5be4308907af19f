import AppStore
import AppStoreTestSupport
import Foundation
import Postgres
import TestSupport
import Testing

/// Imports of existing purchases: a signed transaction or an app receipt proves a purchase, the
/// worker asks Apple's Get Transaction History (the mock), stores the history as facts and binds
/// the chain; only the period in force grants credits.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct ImportTests {
    static func id() -> String { String(UInt64.random(in: 2_000_000_000_000_000...2_999_999_999_999_999)) }
    static let day: TimeInterval = 86_400

    /// A subscriber from before this back end: three monthly periods, no token on any of them.
    static func history(_ pair: WorkerHarness, mock: MockAppStoreServerAPI, token: UUID? = nil) throws -> (
        original: String, latest: JWSTransactionDecodedPayload
    ) {
        let original = id()
        let now = Date()
        var latest: JWSTransactionDecodedPayload?
        for (index, start) in [now - 70 * day, now - 40 * day, now - 10 * day].enumerated() {
            let transaction = pair.transaction(
                index == 0 ? original : id(), original: original, purchase: start, token: token,
                reason: index == 0 ? .purchase : .renewal, signed: now - 3600)
            try mock.addTransaction(transaction, renewalInfo: pair.renewalInfo(original: original, signed: now - 3600))
            latest = transaction
        }
        return (original, latest!)
    }

    /// Posts the import and, while it is pending, reads it back until it is not.
    static func importing(_ body: [String: Any], as user: String, _ pair: WorkerHarness) async throws -> TestHTTPResponse {
        var response = try await pair.client.post(
            "/api/v1/subscriptions/import", json: body, headers: ["Authorization": "Bearer \(pair.ingress.userToken(user))"])
        let deadline = Date() + 30
        while response.status == 202, Date() < deadline {
            let id = try #require(try response.json()["importId"] as? String)
            try await Task.sleep(for: .milliseconds(200))
            response = try await pair.client.get(
                "/api/v1/subscriptions/import/\(id)", headers: ["Authorization": "Bearer \(pair.ingress.userToken(user))"])
        }
        return response
    }

    @Test func aSignedTransactionImportsTheHistoryAndGrantsOnlyThePeriodInForce() async throws {
        let harness = try await SchedulerHarness.start()
        defer { harness.stop() }
        let pair = harness.pair
        let amysToken = try await pair.user("amy")
        let (original, latest) = try Self.history(pair, mock: harness.mock)

        let imported = try await Self.importing(["signedTransaction": try pair.signer.sign(latest)], as: "amy", pair)
        #expect(imported.status == 200, "\(imported.text)")
        let body = try imported.json()
        #expect(body["status"] as? String == "COMPLETED")
        #expect(body["creditsBalance"] as? Int == 1000)
        let chains = try #require(body["chains"] as? [[String: Any]])
        #expect(chains.count == 1)
        #expect(chains.first?["originalTransactionId"] as? String == original)
        #expect(chains.first?["subscriptionStatus"] as? String == "ACTIVE")
        #expect(try await pair.count("SELECT count(*) FROM apple_transaction WHERE original_transaction_id = \(original)") == 3)
        #expect(try await pair.count("SELECT count(*) FROM credit_grant WHERE original_transaction_id = \(original)") == 1)
        #expect(try await pair.value("SELECT source FROM chain_binding WHERE original_transaction_id = \(original)", as: String.self) == "IMPORT")
        let set = await eventually(timeout: 30) { harness.mock.appAccountToken(for: original) == amysToken }
        #expect(set, "Apple was asked to put Amy's token on the chain")

        // Importing again (any transaction of the chain) is the same import and grants nothing.
        let again = try await Self.importing(["signedTransaction": try pair.signer.sign(latest)], as: "amy", pair)
        #expect(try again.json()["importId"] as? String == body["importId"] as? String)
        #expect(try await pair.balance("amy") == 1000)
        // Another user cannot read Amy's import.
        let peek = try await pair.client.get(
            "/api/v1/subscriptions/import/\(body["importId"] as? String ?? "")",
            headers: ["Authorization": "Bearer \(pair.ingress.userToken("eve"))"])
        #expect(peek.status == 404)
        let neither = try await pair.client.post(
            "/api/v1/subscriptions/import", json: ["transactionId": original],
            headers: ["Authorization": "Bearer \(pair.ingress.userToken("amy"))"])
        #expect(neither.status == 400, "a bare transaction id is never trusted")
        try await pair.checkInvariants()
    }

    @Test func anAppReceiptImportsTheChainOfItsTransaction() async throws {
        let harness = try await SchedulerHarness.start()
        defer { harness.stop() }
        let pair = harness.pair
        try await pair.user("joe")
        let (original, latest) = try Self.history(pair, mock: harness.mock)
        let purchase = TestAppReceipt.InAppPurchase(
            productId: WorkerHarness.starter, transactionId: latest.transactionId, originalTransactionId: original)
        let receipt = try pair.signer.signReceipt(TestAppReceipt(bundleId: IngressHarness.bundleID, inAppPurchases: [purchase]))
        let imported = try await Self.importing(["appReceipt": receipt], as: "joe", pair)
        #expect(imported.status == 200, "\(imported.text)")
        #expect(try imported.json()["creditsBalance"] as? Int == 1000)
        #expect(try await pair.subscription(original)?.userID == "joe")

        // Refused with a code, nothing imported.
        let post = { (body: [String: Any]) in
            try await pair.client.post(
                "/api/v1/subscriptions/import", json: body, headers: ["Authorization": "Bearer \(pair.ingress.userToken("joe"))"])
        }
        let foreignCA = try TestAppleSigner().signReceipt(TestAppReceipt(bundleId: IngressHarness.bundleID, inAppPurchases: [purchase]))
        #expect(try await post(["appReceipt": foreignCA]).json()["code"] as? String == "RECEIPT_UNTRUSTED")
        let otherApp = try pair.signer.signReceipt(TestAppReceipt(bundleId: "com.example.other", inAppPurchases: [purchase]))
        #expect(try await post(["appReceipt": otherApp]).json()["code"] as? String == "RECEIPT_BUNDLE_MISMATCH")
        let truncated = String(receipt.prefix(receipt.count / 2))
        let cut = try await post(["appReceipt": truncated])
        #expect(cut.status == 422)
        #expect(try cut.json()["code"] as? String == "RECEIPT_INVALID")
        let empty = try pair.signer.signReceipt(TestAppReceipt(bundleId: IngressHarness.bundleID))
        #expect(try await post(["appReceipt": empty]).json()["code"] as? String == "RECEIPT_NO_TRANSACTION")
        #expect(try await pair.count("SELECT count(*) FROM subscription_import") == 1)
        try await pair.checkInvariants()
    }

    @Test func importingAnotherUsersChainIsAConflictAndBindsNothing() async throws {
        let harness = try await SchedulerHarness.start()
        defer { harness.stop() }
        let pair = harness.pair
        let kimsToken = try await pair.user("kim")
        try await pair.user("lou")
        // Kim's purchase, made in the app with her token, already applied.
        let (original, latest) = try Self.history(pair, mock: harness.mock, token: kimsToken)
        #expect(try await pair.outcome(of: try await pair.notify(.didRenew, transaction: latest)) == .succeeded)
        #expect(try await pair.balance("kim") == 1000)

        let imported = try await Self.importing(["signedTransaction": try pair.signer.sign(latest)], as: "lou", pair)
        #expect(imported.status == 409, "\(imported.text)")
        #expect(try imported.json()["code"] as? String == "ACCOUNT_CONFLICT")
        #expect(try await pair.count("SELECT count(*) FROM chain_binding WHERE original_transaction_id = \(original)") == 0)
        // The history's facts are stored and applied to their owner, Kim; past periods grant nothing.
        let applied = try await eventually(timeout: 30) {
            try await pair.count("SELECT count(*) FROM apple_transaction WHERE original_transaction_id = \(original) AND user_id = 'kim'") == 3
        }
        #expect(applied)
        let settled = try await eventually(timeout: 30) {
            try await pair.count("SELECT count(*) FROM inbound_event WHERE process_status NOT IN ('SUCCEEDED', 'DEAD')") == 0
        }
        #expect(settled)
        #expect(try await pair.balance("kim") == 1000)
        #expect(try await pair.balance("lou") == 0)
        #expect(try await pair.subscription(original)?.frozenReason == nil)
        try await pair.checkInvariants()
    }
}
