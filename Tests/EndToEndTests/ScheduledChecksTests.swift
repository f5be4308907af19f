import AppStore
import AppStoreTestSupport
import Foundation
import Postgres
import TestSupport
import Testing

/// The workers check Apple on a schedule: the hourly pull of the notifications Apple failed to
/// deliver, and the re-query of chains that passed their expiry without a word from Apple.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct ScheduledChecksTests {
    static func id() -> String { String(UInt64.random(in: 2_000_000_000_000_000...2_999_999_999_999_999)) }

    @Test func aFailedDeliveryIsRecoveredByThePullOfFailures() async throws {
        let harness = try await SchedulerHarness.start(extra: [
            "FULFILLMENT_RECOVERY_WINDOW_HOURS": "0", "FULFILLMENT_FAILED_DELIVERY_INTERVAL_SECONDS": "2",
        ])
        defer { harness.stop() }
        let pair = harness.pair
        let token = try await pair.user("alice")
        let lost = pair.transaction(Self.id(), purchase: Date() - 600, token: token, signed: Date() - 600)
        let failed = try harness.historyNotification(.subscribed, .initialBuy, transaction: lost, delivered: false)
        // Apple delivered this one (to another instance, say): onlyFailures leaves it out.
        let other = pair.transaction(Self.id(), purchase: Date() - 600, token: token, signed: Date() - 600)
        let delivered = try harness.historyNotification(.subscribed, .initialBuy, transaction: other, delivered: true)

        #expect(try await pair.outcome(of: failed.uuid, timeout: 60) == .succeeded)
        #expect(try await pair.balance("alice") == 1000)
        #expect(try await pair.count("SELECT count(*) FROM inbound_event WHERE notification_uuid = \(delivered.uuid)") == 0)
        let asked = harness.mock.requests.filter { $0.path == "/inApps/v1/notifications/history" }
        let body = try #require(asked.first).body
        let filters = try AppStoreJSON.decoder().decode(NotificationHistoryRequest.self, from: Data(body))
        #expect(filters.onlyFailures == true)
        #expect(abs(filters.endDate.timeIntervalSince(filters.startDate) - 24 * 3600) < 5, "the default 24-hour window")

        // Pulls repeat every interval; the failure already stored writes nothing again.
        let repeated = try await eventually(timeout: 30) {
            try await pair.count("SELECT count(*) FROM fulfillment_task WHERE kind = 'RECOVERY' AND only_failures AND status = 'DONE'") >= 2
        }
        #expect(repeated)
        #expect(try await pair.count("SELECT count(*) FROM inbound_event WHERE notification_uuid = \(failed.uuid)") == 1)
        #expect(try await pair.count("SELECT count(*) FROM credit_grant") == 1)
        try await pair.checkInvariants()
    }

    @Test func aMissedRenewalIsFoundByTheLapsedChainRequery() async throws {
        let harness = try await SchedulerHarness.start(extra: ["FULFILLMENT_EXPIRY_REQUERY_INTERVAL_SECONDS": "1"])
        defer { harness.stop() }
        let pair = harness.pair
        let now = Date()
        let day: TimeInterval = 86_400
        let token = try await pair.user("bob")
        let chain = Self.id()
        // Bought 30 days and 2 hours ago; the DID_RENEW of an hour ago never reached us.
        // (Signed three hours ago: what the projection reads is the purchase date, and the test
        // signer's certificates are younger than a month.)
        let purchase = pair.transaction(chain, purchase: now - 30 * day - 7200, token: token, signed: now - 3 * 3600)
        let renewalInfo = pair.renewalInfo(original: chain, signed: now - 3 * 3600)
        // Apple knows the renewal before we learn of the purchase: the chain is lapsed the moment it
        // is applied, and the scan may ask Apple at once.
        let renewal = pair.transaction(Self.id(), original: chain, purchase: now - 7200, token: token, reason: .renewal, signed: now - 3600)
        try harness.mock.addTransaction(renewal, renewalInfo: pair.renewalInfo(original: chain, signed: now - 3600))
        let subscribed = try await pair.notify(.subscribed, .initialBuy, transaction: purchase, renewal: renewalInfo)
        let state = try await pair.outcome(of: subscribed)
        #expect(state == .succeeded, "\(state)")

        let found = try await eventually(timeout: 60) {
            try await pair.subscription(chain)?.lastTransactionID == renewal.transactionId
        }
        #expect(found)
        #expect(try await pair.subscription(chain)?.status == "ACTIVE")
        #expect(try await pair.count("SELECT count(*) FROM credit_grant WHERE original_transaction_id = \(chain)") == 2)
        #expect(
            try await pair.value(
                "SELECT reason FROM fulfillment_task WHERE kind = 'REQUERY' AND original_transaction_id = \(chain)", as: String.self)?
                .hasPrefix("LAPSED") == true)
        // Renewed now: not flagged again.
        try await Task.sleep(for: .seconds(3))
        #expect(try await pair.count("SELECT count(*) FROM fulfillment_task WHERE kind = 'REQUERY' AND original_transaction_id = \(chain)") == 1)
        try await pair.checkInvariants()
    }
}

/// Apple's own checks from the command line, against the mock of the App Store Server API.
@Suite(.serialized, .timeLimit(.minutes(5)))
struct AppleCommandTests {
    @Test func aTestNotificationIsRequestedFollowedAndFoundStored() async throws {
        let harness = try await SchedulerHarness.start(workers: 0)
        defer { harness.stop() }
        async let run = harness.subsctlWithAPIKey(["apple", "test-notification", "--wait", "30"])
        // Apple delivers it: here the test posts what the mock signed to the webhook.
        let signed = await eventually(timeout: 30) { !harness.mock.testNotificationPayloads.isEmpty }
        #expect(signed)
        let payload = try #require(harness.mock.testNotificationPayloads.first)
        let delivered = try await harness.pair.client.post("/api/v1/iap/apple/notifications/sandbox", json: ["signedPayload": payload])
        #expect(delivered.status == 200)
        let result = try await run
        #expect(result.status == 0, "\(result.output)")
        #expect(result.output.contains("result=SUCCESS"))
        #expect(result.output.contains("delivered=true"))
        #expect(result.output.contains("stored=true"))

        let unconfigured = try await harness.subsctl(["apple", "test-notification"])
        #expect(unconfigured.status == 78, "no API key in the plain environment: \(unconfigured.output)")
    }

    @Test func aRenewalDateIsExtendedAtAppleAndAudited() async throws {
        let harness = try await SchedulerHarness.start(workers: 0)
        defer { harness.stop() }
        let pair = harness.pair
        let chain = String(UInt64.random(in: 2_000_000_000_000_000...2_999_999_999_999_999))
        let purchase = pair.transaction(chain, purchase: Date() - 86_400, token: UUID())
        try harness.mock.addTransaction(purchase)
        let refused = try await harness.subsctlWithAPIKey([
            "apple", "extend", "--original-transaction-id", chain, "--days", "91", "--reason-code", "3", "--reason", "outage",
        ])
        #expect(refused.status == 64)
        let extended = try await harness.subsctlWithAPIKey([
            "apple", "extend", "--original-transaction-id", chain, "--days", "7", "--reason-code", "3", "--reason", "outage 2026-12-01",
            "--operator", "ops",
        ])
        #expect(extended.status == 0, "\(extended.output)")
        #expect(extended.output.contains("originalTransactionId=\(chain) success=true"))
        let request = try #require(harness.mock.requests.last { $0.path.hasPrefix("/inApps/v1/subscriptions/extend/") })
        let body = try AppStoreJSON.decoder().decode(ExtendRenewalDateRequest.self, from: Data(request.body))
        #expect(body.extendByDays == 7)
        #expect(body.extendReasonCode == 3)
        #expect(body.requestIdentifier != nil)
        #expect(
            try await pair.count(
                "SELECT count(*) FROM audit_log WHERE action = 'RENEWAL_DATE_EXTENDED' AND operator = 'ops' AND after->>'success' = 'true'")
                == 1)
        let unknown = try await harness.subsctlWithAPIKey([
            "apple", "extend", "--original-transaction-id", "1999", "--days", "7", "--reason-code", "0", "--reason", "typo",
        ])
        #expect(unknown.status == 1, "\(unknown.output)")
        #expect(try await pair.count("SELECT count(*) FROM audit_log WHERE action = 'RENEWAL_DATE_EXTENDED'") == 2)
    }
}
