import AppStore
import AppStoreTestSupport
import Domain
import Foundation
import FulfillmentApp
import Postgres
import TestSupport
import Testing

/// The notification matrix through the real pair: Apple's notifications POSTed to the ingress,
/// applied by a worker, checked along the whole evidence chain (order, transaction, event,
/// subscription, grants and ledger, status history) and against a replay of the stored facts.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct FulfillmentNotificationTests {
    static let day: TimeInterval = 86_400

    static func id() -> String { String(UInt64.random(in: 2_000_000_000_000_000...2_999_999_999_999_999)) }

    /// Scenario 4: the app was killed after paying; only SUBSCRIBED arrives and completes the order.
    @Test func initialBuyCompletesTheOpenOrderActivatesAndGrantsOnce() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        let (orderNo, token) = try await harness.order("alice")
        let id = Self.id()
        let purchase = harness.transaction(id, token: token)
        let uuid = try await harness.notify(.subscribed, .initialBuy, transaction: purchase, renewal: harness.renewalInfo(original: id))
        #expect(try await harness.outcome(of: uuid) == .succeeded)

        #expect(
            try await harness.value(
                "SELECT status || ':' || transaction_id || ':' || environment FROM payment_order WHERE order_no = \(orderNo)",
                as: String.self) == "FULFILLED:\(id):Sandbox")
        #expect(
            try await harness.value(
                "SELECT user_id FROM apple_transaction WHERE transaction_id = \(id)", as: String.self) == "alice")
        let subscription = try #require(try await harness.subscription(id))
        #expect(subscription.status == "ACTIVE")
        #expect(subscription.userID == "alice")
        #expect(subscription.activeProductID == WorkerHarness.starter)
        #expect(subscription.autoRenewEnabled)
        #expect(try await harness.balance("alice") == 1000)
        #expect(
            try await harness.value(
                "SELECT string_agg(coalesce(previous_status, '-') || '>' || current_status, ',' ORDER BY id) FROM status_history WHERE entity_key = \(orderNo)",
                as: String.self) == "->CREATED,CREATED>VERIFIED,VERIFIED>FULFILLED")
        #expect(
            try await harness.value(
                "SELECT cause FROM status_history WHERE entity_type = 'SUBSCRIPTION' AND entity_key = \("Sandbox:" + id)",
                as: String.self) == "apple.SUBSCRIBED.INITIAL_BUY")

        // Apple delivers it again (a new notification UUID for the same transaction): nothing new.
        let again = try await harness.notify(.subscribed, .initialBuy, transaction: purchase)
        #expect(try await harness.outcome(of: again) == .succeeded)
        #expect(try await harness.balance("alice") == 1000)
        #expect(try await harness.count("SELECT count(*) FROM credit_grant") == 1)
        #expect(try await harness.count("SELECT count(*) FROM payment_order") == 1)
        try await harness.checkInvariants()

        // The replay check sees a row that the facts do not give.
        try await harness.pool.query("UPDATE user_subscription SET status = 'EXPIRED'")
        #expect(try await ChainReplay.mismatches(pool: harness.pool, now: Date()).count == 1)
    }

    /// Signed ids in another form than Apple's (a test or Xcode signer): the notification is stored
    /// and acknowledged as any other, then set aside DEAD with its own code, kept for replay and
    /// never applied: no fact, order, subscription or credit moves.
    @Test func transactionIdsInAnotherFormAreSetAsideDeadAndNeverApplied() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        let (orderNo, token) = try await harness.order("alice")
        let markup = "<b>1</b>"
        let uuids = [
            try await harness.notify(
                .subscribed, .initialBuy, transaction: harness.transaction(markup, token: token),
                renewal: harness.renewalInfo(original: markup)),
            try await harness.notify(.subscribed, .initialBuy, transaction: harness.transaction(Self.id(), original: "1e9", token: token)),
            try await harness.notify(.didChangeRenewalStatus, .autoRenewDisabled, renewal: harness.renewalInfo(original: "12 34")),
        ]
        for uuid in uuids {
            #expect(try await harness.outcome(of: uuid) == .dead("TRANSACTION_ID_INVALID"), "\(uuid)")
        }
        #expect(
            try await harness.count(
                "SELECT count(*) FROM inbound_event WHERE process_status = 'DEAD' AND signed_payload IS NOT NULL") == uuids.count,
            "kept for replay")
        for table in ["apple_transaction", "apple_renewal_info", "user_subscription", "credit_grant", "unmatched_fact", "chain_binding"] {
            #expect(try await harness.count("SELECT count(*) FROM \(identifier: table)") == 0, "\(table)")
        }
        #expect(try await harness.balance("alice") == 0)
        #expect(
            try await harness.value("SELECT status FROM payment_order WHERE order_no = \(orderNo)", as: String.self) == "CREATED")
    }

    /// Scenarios 9, 14, 15, 16, 17 and 25: renewals, grace, billing retry, recovery, expiry, and a
    /// renewal processed before an older billing failure.
    @Test func renewalsGraceBillingRetryRecoveryAndExpiry() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        let token = try await harness.user("alice")
        let now = Date()
        let day = Self.day

        // A chain bought 65 days ago and renewed twice since: one RENEWAL order and one grant each.
        let id = Self.id()
        // Apple signs when it sends (the test chain's certificates are valid since yesterday).
        let hour: TimeInterval = 3600
        let first = harness.transaction(id, purchase: now - 65 * day, token: token, signed: now - 10 * hour)
        let second = harness.transaction(
            Self.id(), original: id, purchase: now - 35 * day, token: token, reason: .renewal, signed: now - 9 * hour)
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: first)) == .succeeded)
        #expect(try await harness.outcome(of: try await harness.notify(.didRenew, transaction: second)) == .succeeded)
        #expect(try await harness.count("SELECT count(*) FROM payment_order WHERE order_type = 'RENEWAL'") == 1)
        #expect(
            try await harness.value(
                "SELECT order_type FROM payment_order WHERE transaction_id = \(id)", as: String.self) == "RECOVERY")
        #expect(try await harness.balance("alice") == 2000)
        #expect(try await harness.subscription(id)?.status == "EXPIRED", "the second period ended 5 days ago")

        // The third charge failed: grace period, service continues, no new grant.
        let graceEnds = now + 10 * day
        let grace = harness.renewalInfo(original: id, billingRetry: true, grace: graceEnds, signed: now - 8 * hour)
        let inGrace = try await harness.notify(.didFailToRenew, .gracePeriod, transaction: second, renewal: grace)
        #expect(try await harness.outcome(of: inGrace) == .succeeded)
        var row = try #require(try await harness.subscription(id))
        #expect(row.status == "GRACE")
        #expect(row.graceExpiresAt == TestPayloads.wholeMilliseconds(graceEnds))
        #expect(try await harness.balance("alice") == 2000)

        // Grace over, still retrying: BILLING_RETRY (paid service stops, recovery still possible).
        let retrying = harness.renewalInfo(original: id, billingRetry: true, grace: now - day, signed: now - 7 * hour)
        #expect(try await harness.outcome(of: try await harness.notify(.gracePeriodExpired, transaction: second, renewal: retrying)) == .succeeded)
        #expect(try await harness.subscription(id)?.status == "BILLING_RETRY")

        // Billing recovered: a new period, ACTIVE again, granted.
        let recovered = harness.transaction(
            Self.id(), original: id, purchase: now - hour, token: token, reason: .renewal, signed: now - 6 * hour)
        let recovery = try await harness.notify(
            .didRenew, .billingRecovery, transaction: recovered, renewal: harness.renewalInfo(original: id, signed: now - 6 * hour))
        #expect(try await harness.outcome(of: recovery) == .succeeded)
        row = try #require(try await harness.subscription(id))
        #expect(row.status == "ACTIVE")
        #expect(row.lastTransactionID == recovered.transactionId)
        #expect(row.graceExpiresAt == nil)
        #expect(try await harness.balance("alice") == 3000)
        #expect(
            try await harness.value(
                "SELECT string_agg(current_status, ',' ORDER BY id) FROM status_history WHERE entity_key = \("Sandbox:" + id)",
                as: String.self) == "EXPIRED,GRACE,BILLING_RETRY,ACTIVE", "the first facts arrive after both periods ended")

        // Scenario 14: a failure without grace goes straight to BILLING_RETRY.
        let bob = try await harness.user("bob")
        let lapsed = Self.id()
        let lapsedPurchase = harness.transaction(lapsed, purchase: now - 31 * day, token: bob, signed: now - 10 * hour)
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: lapsedPurchase)) == .succeeded)
        let failed = harness.renewalInfo(original: lapsed, billingRetry: true, signed: now - 9 * hour)
        #expect(try await harness.outcome(of: try await harness.notify(.didFailToRenew, transaction: lapsedPurchase, renewal: failed)) == .succeeded)
        #expect(try await harness.subscription(lapsed)?.status == "BILLING_RETRY")

        // Scenario 17: voluntary expiry.
        let voluntary = harness.renewalInfo(original: lapsed, autoRenew: false, signed: now - 8 * hour)
        #expect(
            try await harness.outcome(of: try await harness.notify(.expired, .voluntary, transaction: lapsedPurchase, renewal: voluntary))
                == .succeeded)
        row = try #require(try await harness.subscription(lapsed))
        #expect(row.status == "EXPIRED")
        #expect(!row.autoRenewEnabled)

        // Scenario 25: the renewal is processed before the older billing failure; it stays ACTIVE.
        let carol = try await harness.user("carol")
        let chain = Self.id()
        let old = harness.transaction(chain, purchase: now - 31 * day, token: carol, signed: now - 10 * hour)
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: old)) == .succeeded)
        let renewed = harness.transaction(
            Self.id(), original: chain, purchase: now - day, token: carol, reason: .renewal, signed: now - 8 * hour)
        let renewedInfo = harness.renewalInfo(original: chain, signed: now - 8 * hour)
        #expect(try await harness.outcome(of: try await harness.notify(.didRenew, transaction: renewed, renewal: renewedInfo)) == .succeeded)
        let staleFailure = harness.renewalInfo(original: chain, billingRetry: true, signed: now - 9 * hour)
        #expect(try await harness.outcome(of: try await harness.notify(.didFailToRenew, transaction: old, renewal: staleFailure)) == .succeeded)
        row = try #require(try await harness.subscription(chain))
        #expect(row.status == "ACTIVE")
        #expect(row.lastTransactionID == renewed.transactionId)
        #expect(
            try await harness.value(
                "SELECT is_in_billing_retry FROM apple_renewal_info WHERE original_transaction_id = \(chain)", as: Bool.self) == false)
        try await harness.checkInvariants()
    }

    /// Scenario 18: a refund takes back what remains of the grant (never below zero), a declined
    /// refund changes nothing, a reversal restores what was taken.
    @Test func refundDeclinedAndReversed() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        let token = try await harness.user("alice")
        let now = Date()
        let id = Self.id()
        let purchase = harness.transaction(id, purchase: now - Self.day, token: token, signed: now - 7200)
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
        // Alice used 400 credits (the metering API belongs to the credits issue: booked directly here).
        try await harness.pool.query(
            """
            WITH used AS (
                UPDATE credit_account SET balance = balance - 400000000 WHERE user_id = 'alice' AND pool = 'SUBSCRIPTION'
                RETURNING balance)
            INSERT INTO credit_ledger (user_id, pool, delta, balance_after, entry_type, reference)
            SELECT 'alice', 'SUBSCRIPTION', -400000000, balance, 'USAGE', 'test-usage' FROM used
            """)
        try await harness.pool.query("SELECT credit_burn_lots('alice', 'SUBSCRIPTION', 400000000)")

        var refunded = purchase
        refunded.revocationDate = TestPayloads.wholeMilliseconds(now - 3600)
        refunded.revocationReason = .refundedDueToIssue
        refunded.signedDate = TestPayloads.wholeMilliseconds(now - 3600)
        #expect(try await harness.outcome(of: try await harness.notify(.refund, transaction: refunded)) == .succeeded)
        #expect(try await harness.subscription(id)?.status == "REVOKED")
        #expect(try await harness.balance("alice") == 0)
        #expect(
            try await harness.value(
                "SELECT revoked_amount / 1000000 || '/' || unrecoverable_amount / 1000000 FROM credit_grant", as: String.self)
                == "600/400")
        #expect(
            try await harness.value(
                "SELECT revocation_reason FROM apple_transaction WHERE transaction_id = \(id)", as: Int.self) == 1)

        let declined = try await harness.notify(.refundDeclined, transaction: purchase)
        #expect(try await harness.outcome(of: declined) == .succeeded)
        #expect(try await harness.subscription(id)?.status == "REVOKED")
        // The same refund again: nothing more to take.
        #expect(try await harness.outcome(of: try await harness.notify(.refund, transaction: refunded)) == .succeeded)
        #expect(try await harness.count("SELECT count(*) FROM credit_ledger WHERE entry_type = 'REVOCATION'") == 1)

        var reversed = purchase
        reversed.signedDate = TestPayloads.wholeMilliseconds(now - 60)
        #expect(try await harness.outcome(of: try await harness.notify(.refundReversed, transaction: reversed)) == .succeeded)
        #expect(try await harness.subscription(id)?.status == "ACTIVE")
        #expect(try await harness.balance("alice") == 600)
        #expect(
            try await harness.value(
                "SELECT string_agg(entry_type || ':' || (delta / 1000000), ',' ORDER BY id) FROM credit_ledger", as: String.self)
                == "GRANT:1000,USAGE:-400,REVOCATION:-600,RESTORATION:600")
        #expect(
            try await harness.value(
                "SELECT string_agg(current_status, ',' ORDER BY id) FROM status_history WHERE entity_type = 'SUBSCRIPTION'",
                as: String.self) == "ACTIVE,REVOKED,ACTIVE")
        try await harness.checkInvariants()
    }

    /// Scenarios 10, 11, 12 and 13: the auto-renew flag alone, an immediate upgrade, a crossgrade and
    /// a downgrade that wait for the renewal.
    @Test func autoRenewUpgradeCrossgradeAndDowngrade() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        let now = Date()
        let day = Self.day

        // Auto-renew off then on: only the flag moves.
        let alice = try await harness.user("alice")
        let id = Self.id()
        let hour: TimeInterval = 3600
        let starter = harness.transaction(id, purchase: now - 5 * day, token: alice, signed: now - 10 * hour)
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: starter)) == .succeeded)
        let off = harness.renewalInfo(original: id, autoRenew: false, signed: now - 9 * hour)
        #expect(
            try await harness.outcome(of: try await harness.notify(.didChangeRenewalStatus, .autoRenewDisabled, transaction: starter, renewal: off))
                == .succeeded)
        var row = try #require(try await harness.subscription(id))
        #expect(!row.autoRenewEnabled)
        #expect(row.status == "ACTIVE")
        let on = harness.renewalInfo(original: id, autoRenew: true, signed: now - 8 * hour)
        #expect(
            try await harness.outcome(of: try await harness.notify(.didChangeRenewalStatus, .autoRenewEnabled, transaction: starter, renewal: on))
                == .succeeded)
        #expect(try await harness.subscription(id)?.autoRenewEnabled == true)
        #expect(try await harness.balance("alice") == 1000)
        #expect(try await harness.count("SELECT count(*) FROM payment_order WHERE user_id = 'alice'") == 1)

        // Upgrade to a higher level: a new transaction takes effect now, a CHANGE order, the difference.
        let upgraded = harness.transaction(
            Self.id(), original: id, product: WorkerHarness.pro, purchase: now - 2 * day, token: alice, signed: now - 7 * hour)
        let upgradeInfo = harness.renewalInfo(original: id, product: WorkerHarness.pro, signed: now - 7 * hour)
        #expect(
            try await harness.outcome(of: try await harness.notify(.didChangeRenewalPref, .upgrade, transaction: upgraded, renewal: upgradeInfo))
                == .succeeded)
        row = try #require(try await harness.subscription(id))
        #expect(row.activeProductID == WorkerHarness.pro)
        #expect(row.lastTransactionID == upgraded.transactionId)
        #expect(
            try await harness.value(
                "SELECT order_type FROM payment_order WHERE transaction_id = \(upgraded.transactionId!)", as: String.self) == "CHANGE")
        #expect(
            try await harness.value(
                "SELECT reason || ':' || amount / 1000000 FROM credit_grant WHERE transaction_id = \(upgraded.transactionId!)",
                as: String.self) == "UPGRADE:2000", "pro grants the difference on an upgrade")
        #expect(try await harness.balance("alice") == 3000)

        // Downgrade: pending product; current plan, expiry and credits unchanged.
        let down = harness.renewalInfo(
            original: id, product: WorkerHarness.pro, autoRenewProduct: WorkerHarness.starter, signed: now - 6 * hour)
        #expect(
            try await harness.outcome(of: try await harness.notify(.didChangeRenewalPref, .downgrade, transaction: upgraded, renewal: down))
                == .succeeded)
        row = try #require(try await harness.subscription(id))
        #expect(row.activeProductID == WorkerHarness.pro)
        #expect(row.pendingProductID == WorkerHarness.starter)
        #expect(try await harness.balance("alice") == 3000)

        // Crossgrade to the yearly plan of the same level: pending until the renewal, then switched.
        let bob = try await harness.user("bob")
        let chain = Self.id()
        let monthly = harness.transaction(
            chain, product: WorkerHarness.pro, purchase: now - 30 * day + 3600, token: bob, signed: now - 10 * hour)
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: monthly)) == .succeeded)
        let cross = harness.renewalInfo(
            original: chain, product: WorkerHarness.pro, autoRenewProduct: WorkerHarness.proYearly, signed: now - 9 * hour)
        #expect(
            try await harness.outcome(of: try await harness.notify(.didChangeRenewalPref, .downgrade, transaction: monthly, renewal: cross))
                == .succeeded)
        row = try #require(try await harness.subscription(chain))
        #expect(row.activeProductID == WorkerHarness.pro && row.pendingProductID == WorkerHarness.proYearly)
        let yearly = harness.transaction(
            Self.id(), original: chain, product: WorkerHarness.proYearly, purchase: now - 60, days: 365, token: bob,
            reason: .renewal, signed: now - 60)
        let yearlyInfo = harness.renewalInfo(original: chain, product: WorkerHarness.proYearly, signed: now - 60)
        #expect(try await harness.outcome(of: try await harness.notify(.didRenew, transaction: yearly, renewal: yearlyInfo)) == .succeeded)
        row = try #require(try await harness.subscription(chain))
        #expect(row.activeProductID == WorkerHarness.proYearly)
        #expect(row.pendingProductID == nil)
        #expect(
            try await harness.value(
                "SELECT grant_key FROM credit_grant WHERE transaction_id = \(yearly.transactionId!)", as: String.self)
                == "period:Sandbox:\(yearly.transactionId!):m0", "a yearly plan grants its first month now")
        #expect(try await harness.balance("bob") == 6000)
        try await harness.checkInvariants()
    }

    /// Scenario 27: family-shared access is a separate entitlement without a paid order; REVOKE ends
    /// only that member's access. Scenario 26: an unknown type is stored, acknowledged, counted.
    @Test func familySharingRevokeAndUnknownTypes() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        let now = Date()
        let owner = try await harness.user("alice")
        let member = try await harness.user("fam")
        let bought = Self.id()
        let purchase = harness.transaction(bought, purchase: now - Self.day, token: owner, signed: now - 7200)
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
        let shared = Self.id()
        var access = harness.transaction(shared, purchase: now - Self.day, token: member, signed: now - 7200)
        access.inAppOwnershipType = .familyShared
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: access)) == .succeeded)
        let row = try #require(try await harness.subscription(shared))
        #expect(row.status == "ACTIVE" && row.isFamilyShared && row.userID == "fam")
        #expect(try await harness.count("SELECT count(*) FROM payment_order WHERE user_id = 'fam'") == 0)
        #expect(try await harness.balance("fam") == 0, "the catalogue grants family members no credits")

        var revoked = access
        revoked.revocationDate = TestPayloads.wholeMilliseconds(now - 60)
        revoked.revocationReason = .refundedForOtherReason
        revoked.signedDate = TestPayloads.wholeMilliseconds(now - 60)
        #expect(try await harness.outcome(of: try await harness.notify(.revoke, transaction: revoked)) == .succeeded)
        #expect(try await harness.subscription(shared)?.status == "REVOKED")
        #expect(try await harness.subscription(bought)?.status == "ACTIVE")
        #expect(try await harness.balance("alice") == 1000)

        // A type this version does not know, and TEST: stored, acknowledged, nothing changes.
        var payload = ResponseBodyV2DecodedPayload()
        payload.rawNotificationType = "SOMETHING_APPLE_ADDS_NEXT_YEAR"
        payload.rawSubtype = "WHATEVER"
        payload.notificationUUID = UUID().uuidString.lowercased()
        payload.signedDate = TestPayloads.wholeMilliseconds(now)
        var data = NotificationData()
        data.bundleId = IngressHarness.bundleID
        data.environment = .sandbox
        data.signedTransactionInfo = try harness.signer.sign(purchase)
        payload.data = data
        let response = try await harness.client.post(
            "/api/v1/iap/apple/notifications/sandbox", json: ["signedPayload": try harness.signer.sign(payload)])
        #expect(response.status == 200)
        #expect(try await harness.outcome(of: payload.notificationUUID!) == .succeeded)
        let test = try await harness.notify(.test)
        #expect(try await harness.outcome(of: test) == .succeeded)
        #expect(
            try await harness.metric(
                #"subs_fulfillment_unknown_notifications_total{type="SOMETHING_APPLE_ADDS_NEXT_YEAR"}"#, reaching: 1) == 1)
        #expect(try await harness.count("SELECT count(*) FROM payment_order") == 1)
        #expect(try await harness.count("SELECT count(*) FROM processed_event") == 5)
        try await harness.checkInvariants()
    }

    /// Every type and subtype of Apple's documentation (NotificationMatrix.documented) through the
    /// ingress and a worker: each is acknowledged, stored and processed, none counted as unknown.
    @Test func noDocumentedNotificationIsDropped() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        var uuids: [(String, String)] = []
        for (type, subtypes) in NotificationMatrix.documented {
            for subtype in subtypes {
                var payload = ResponseBodyV2DecodedPayload()
                payload.rawNotificationType = type
                payload.rawSubtype = subtype
                payload.notificationUUID = UUID().uuidString.lowercased()
                payload.signedDate = TestPayloads.wholeMilliseconds(Date())
                var data = NotificationData()
                data.bundleId = IngressHarness.bundleID
                data.environment = .sandbox
                payload.data = data
                let response = try await harness.client.post(
                    "/api/v1/iap/apple/notifications/sandbox", json: ["signedPayload": try harness.signer.sign(payload)])
                #expect(response.status == 200, "\(type)/\(subtype ?? "-"): \(response.text)")
                uuids.append(("\(type)/\(subtype ?? "-")", payload.notificationUUID!))
            }
        }
        for (name, uuid) in uuids {
            #expect(try await harness.outcome(of: uuid) == .succeeded, "\(name)")
        }
        #expect(try await harness.count("SELECT count(*) FROM processed_event") == uuids.count)
        let port = try #require(harness.workers[0].httpPort)
        let metrics = try await TestHTTPClient(port: port).get("/metrics").text
        #expect(!metrics.contains("subs_fulfillment_unknown_notifications_total{"), "no documented type counted as unknown")
    }
}
