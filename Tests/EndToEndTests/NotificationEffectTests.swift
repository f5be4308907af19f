import AppStore
import AppStoreTestSupport
import Domain
import Foundation
import Postgres
import Storage
import TestSupport
import Testing

/// README's "What each notification changes": one test per row, through the ingress and a worker
/// against PostgreSQL, each asserting the row's effect (subscription, entitlement, credits, order,
/// outbound events) and that nothing else moved, never only that the event SUCCEEDED.
@Suite(.serialized, .timeLimit(.minutes(3)))
struct NotificationEffectTests {
    static let day: TimeInterval = 86_400
    static let hour: TimeInterval = 3600

    static func id() -> String { String(UInt64.random(in: 2_000_000_000_000_000...2_999_999_999_999_999)) }

    /// The outbound events written since `seq`, as `type` in commit order.
    static func events(_ harness: WorkerHarness, after seq: Int) async throws -> [String] {
        let types = try await harness.value(
            "SELECT string_agg(type, ',' ORDER BY seq) FROM outbound_event WHERE seq > \(seq)", as: String.self)
        return types.map { $0.split(separator: ",").map(String.init) } ?? []
    }

    /// The newest outbound event's position, to read what a notification added after it.
    static func lastEvent(_ harness: WorkerHarness) async throws -> Int {
        try await harness.count("SELECT coalesce(max(seq), 0)::int FROM outbound_event")
    }

    /// Everything a notification could change, as one comparable snapshot.
    static func snapshot(_ harness: WorkerHarness) async throws -> String {
        try await harness.value(
            """
            SELECT (SELECT count(*) FROM payment_order) || '|' || (SELECT count(*) FROM credit_grant) || '|'
                || (SELECT count(*) FROM credit_ledger) || '|' || (SELECT coalesce(sum(balance), 0) FROM credit_account) || '|'
                || (SELECT count(*) FROM outbound_event) || '|' || (SELECT count(*) FROM status_history) || '|'
                || (SELECT coalesce(string_agg(status || ':' || version || ':' || coalesce(expires_at::text, '-'), ','), '-')
                      FROM user_subscription)
            """, as: String.self) ?? ""
    }

    /// alice's chain bought 70 days ago, one 30-day period, lapsed since: the starting point of a
    /// resubscription. Returns the chain and alice's token.
    static func lapsedChain(_ harness: WorkerHarness) async throws -> (chain: String, token: UUID) {
        let token = try await harness.user("alice")
        let now = Date()
        let chain = id()
        let first = harness.transaction(chain, purchase: now - 70 * day, token: token, signed: now - 10 * hour)
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: first)) == .succeeded)
        #expect(try await harness.subscription(chain)?.status == "EXPIRED")
        return (chain, token)
    }

    /// alice's chain bought a day ago, ACTIVE, 1000 credits granted.
    static func activeChain(_ harness: WorkerHarness) async throws -> JWSTransactionDecodedPayload {
        let token = try await harness.user("alice")
        let now = Date()
        let purchase = harness.transaction(id(), purchase: now - day, token: token, signed: now - 10 * hour)
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
        #expect(try await harness.subscription(purchase.transactionId!)?.status == "ACTIVE")
        #expect(try await harness.balance("alice") == 1000)
        return purchase
    }

    /// The effect shared by both resubscription rows: a RECOVERY order FULFILLED for the new
    /// transaction, the chain ACTIVE on it again, its own grant, and the events saying so.
    static func expectResubscribed(
        _ harness: WorkerHarness, chain: String, transaction: String, after seq: Int, cause: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        #expect(
            try await harness.value(
                "SELECT order_type || ':' || status FROM payment_order WHERE transaction_id = \(transaction)", as: String.self)
                == "RECOVERY:FULFILLED", sourceLocation: sourceLocation)
        let row = try #require(try await harness.subscription(chain), sourceLocation: sourceLocation)
        #expect(row.status == "ACTIVE" && row.lastTransactionID == transaction, sourceLocation: sourceLocation)
        #expect(
            try await harness.value(
                "SELECT reason || ':' || amount / 1000000 FROM credit_grant WHERE transaction_id = \(transaction)", as: String.self)
                == "PURCHASE:1000", sourceLocation: sourceLocation)
        #expect(
            Set(try await events(harness, after: seq)) == ["entitlement.granted", "order.fulfilled", "credits.granted"],
            sourceLocation: sourceLocation)
        #expect(
            try await harness.value(
                "SELECT previous_status || '>' || current_status || ':' || cause FROM status_history WHERE entity_type = 'SUBSCRIPTION' ORDER BY id DESC LIMIT 1",
                as: String.self) == "EXPIRED>ACTIVE:\(cause)", sourceLocation: sourceLocation)
        try await harness.checkInvariants(sourceLocation: sourceLocation)
    }

    /// A lapsed chain resubscribed by `type` / RESUBSCRIBE with a new transaction (`adjust`ed):
    /// the resubscription's effect (`expectResubscribed`); returns the harness, still running, and
    /// the new transaction's id for a row's own checks.
    static func resubscribe(
        _ type: NotificationTypeV2, adjust: (inout JWSTransactionDecodedPayload) -> Void = { _ in }
    ) async throws -> (harness: WorkerHarness, transaction: String) {
        let harness = try await WorkerHarness.start()
        do {
            let (chain, token) = try await lapsedChain(harness)
            let seq = try await lastEvent(harness)
            let now = Date()
            var again = harness.transaction(id(), original: chain, purchase: now - hour, token: token, signed: now - 60)
            adjust(&again)
            let uuid = try await harness.notify(
                type, .resubscribe, transaction: again, renewal: harness.renewalInfo(original: chain, signed: now - 60))
            #expect(try await harness.outcome(of: uuid) == .succeeded)
            try await expectResubscribed(
                harness, chain: chain, transaction: again.transactionId!, after: seq, cause: "apple.\(type.rawValue).RESUBSCRIBE")
            return (harness, again.transactionId!)
        } catch {
            harness.stop()
            throw error
        }
    }

    /// Row SUBSCRIBED / RESUBSCRIBE.
    @Test func subscribedResubscribe() async throws {
        try await Self.resubscribe(.subscribed).harness.stop()
    }

    /// Row OFFER_REDEEMED / RESUBSCRIBE: a win-back offer brings a lapsed subscriber back; the
    /// same effect as a resubscription, with the offer recorded on the transaction.
    @Test func offerRedeemedResubscribe() async throws {
        let (harness, transaction) = try await Self.resubscribe(.offerRedeemed) { offer in
            offer.offerType = .winBackOffer
            offer.offerIdentifier = "come-back-half-price"
            offer.offerDiscountType = .payAsYouGo
            offer.offerPeriod = "P1M"
            offer.price = 4990
        }
        defer { harness.stop() }
        #expect(
            try await harness.value(
                "SELECT offer_type || ':' || offer_identifier FROM apple_transaction WHERE transaction_id = \(transaction)",
                as: String.self) == "4:come-back-half-price")
    }

    /// Row RENEWAL_EXTENDED: Apple moved this chain's renewal date (a compensation): the expiry
    /// follows, the status and credits do not, no order, and the app hears of the new date.
    @Test func renewalExtended() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        let purchase = try await Self.activeChain(harness)
        let seq = try await Self.lastEvent(harness)
        var extended = purchase
        extended.expiresDate = purchase.expiresDate! + 7 * Self.day
        extended.signedDate = TestPayloads.wholeMilliseconds(Date() - 60)
        let uuid = try await harness.notify(.renewalExtended, transaction: extended)
        #expect(try await harness.outcome(of: uuid) == .succeeded)
        let row = try #require(try await harness.subscription(purchase.transactionId!))
        #expect(row.status == "ACTIVE")
        #expect(row.expiresAt == extended.expiresDate)
        #expect(try await harness.balance("alice") == 1000)
        #expect(try await harness.count("SELECT count(*) FROM payment_order") == 1)
        #expect(try await harness.count("SELECT count(*) FROM credit_grant") == 1)
        #expect(try await Self.events(harness, after: seq) == ["subscription.renewal_changed"])
        #expect(
            try await harness.value(
                "SELECT data->>'expiresAt' FROM outbound_event WHERE seq > \(seq)", as: String.self)?.hasPrefix(
                    String(ISO8601DateFormatter().string(from: extended.expiresDate!).prefix(19))) == true)
        // Apple delivers it again: nothing new.
        #expect(try await harness.outcome(of: try await harness.notify(.renewalExtended, transaction: extended)) == .succeeded)
        #expect(try await Self.events(harness, after: seq).count == 1)
        try await harness.checkInvariants()
    }

    /// Row RENEWAL_EXTENSION / SUMMARY: the tally of a mass extension. Each chain's new date came
    /// in its own RENEWAL_EXTENDED; the summary is stored and changes nothing.
    @Test func renewalExtensionSummary() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        _ = try await Self.activeChain(harness)
        let before = try await Self.snapshot(harness)
        var payload = ResponseBodyV2DecodedPayload()
        payload.notificationType = .renewalExtension
        payload.subtype = .summary
        payload.notificationUUID = UUID().uuidString.lowercased()
        payload.version = "2.0"
        payload.signedDate = TestPayloads.wholeMilliseconds(Date())
        var summary = Summary()
        summary.environment = .sandbox
        summary.bundleId = IngressHarness.bundleID
        summary.productId = WorkerHarness.starter
        summary.requestIdentifier = UUID().uuidString
        summary.storefrontCountryCodes = ["USA"]
        summary.succeededCount = 1
        summary.failedCount = 0
        payload.summary = summary
        let response = try await harness.client.post(
            "/api/v1/iap/apple/notifications/sandbox", json: ["signedPayload": try harness.signer.sign(payload)])
        #expect(response.status == 200, "\(response.text)")
        #expect(try await harness.outcome(of: payload.notificationUUID!) == .succeeded)
        #expect(
            try await harness.value(
                "SELECT notification_type || '/' || subtype FROM inbound_event WHERE notification_uuid = \(payload.notificationUUID!)",
                as: String.self) == "RENEWAL_EXTENSION/SUMMARY")
        #expect(try await Self.snapshot(harness) == before)
        try await harness.checkInvariants()
    }

    /// Row ONE_TIME_CHARGE: a credit pack (consumable) bought: its PERMANENT lot, once; an order
    /// FULFILLED; no subscription.
    @Test func oneTimeCharge() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        let pack = "com.example.pack500"
        try await harness.pool.query(
            """
            INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount,
                                         kind, permanent_credits)
            VALUES (\(IngressHarness.bundleID), \(pack), '', 'pack500', 1, 'P1M', 0, 'CONSUMABLE', 500)
            """)
        let token = try await harness.user("alice")
        var charge = harness.transaction(Self.id(), product: pack, purchase: Date() - Self.hour, token: token, signed: Date() - 60)
        charge.expiresDate = nil
        charge.type = .consumable
        charge.subscriptionGroupIdentifier = nil
        #expect(try await harness.outcome(of: try await harness.notify(.oneTimeCharge, transaction: charge)) == .succeeded)
        #expect(try await harness.outcome(of: try await harness.notify(.oneTimeCharge, transaction: charge)) == .succeeded)
        #expect(
            try await harness.value(
                "SELECT pool || ':' || reason || ':' || amount / 1000000 FROM credit_grant WHERE user_id = 'alice'", as: String.self)
                == "PERMANENT:CONSUMABLE:500")
        #expect(
            try await harness.value(
                "SELECT balance / 1000000 FROM credit_account WHERE user_id = 'alice' AND pool = 'PERMANENT'", as: Int64.self) == 500)
        #expect(
            try await harness.value(
                "SELECT status FROM payment_order WHERE transaction_id = \(charge.transactionId!)", as: String.self) == "FULFILLED")
        #expect(try await harness.count("SELECT count(*) FROM user_subscription") == 0)
        #expect(Set(try await Self.events(harness, after: 0)) == ["order.fulfilled", "credits.granted"])
        #expect(try await Self.events(harness, after: 0).count == 2)
        try await harness.checkInvariants()
    }

    /// The PRICE_INCREASE rows: the consent state Apple reports reaches the app (GET current);
    /// service, expiry and credits stay as they are, whatever the answer.
    static func priceIncrease(_ subtype: Subtype, status: PriceIncreaseStatus, expected: String) async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        let purchase = try await Self.activeChain(harness)
        let chain = purchase.transactionId!
        let before = try #require(try await harness.subscription(chain))
        let seq = try await Self.lastEvent(harness)
        var renewal = harness.renewalInfo(original: chain, signed: Date() - 60)
        renewal.priceIncreaseStatus = status
        renewal.renewalPrice = 12_990
        #expect(
            try await harness.outcome(of: try await harness.notify(.priceIncrease, subtype, transaction: purchase, renewal: renewal))
                == .succeeded)
        let response = try await harness.client.get(
            "/api/v1/subscriptions/current", headers: ["Authorization": "Bearer \(harness.ingress.userToken("alice"))"])
        let body = try response.json()
        #expect(body["priceIncreaseStatus"] as? String == expected)
        #expect(body["renewalPrice"] as? Int == 12_990)
        #expect(body["status"] as? String == "ACTIVE")
        let after = try #require(try await harness.subscription(chain))
        #expect(after.status == before.status && after.expiresAt == before.expiresAt && after.autoRenewEnabled)
        #expect(try await harness.balance("alice") == 1000)
        #expect(try await Self.events(harness, after: seq).isEmpty, "no change the app's entitlement checks act on")
        try await harness.checkInvariants()
    }

    /// Row PRICE_INCREASE / PENDING.
    @Test func priceIncreasePending() async throws {
        try await Self.priceIncrease(.pending, status: .customerHasNotResponded, expected: "PENDING")
    }

    /// Row PRICE_INCREASE / ACCEPTED.
    @Test func priceIncreaseAccepted() async throws {
        try await Self.priceIncrease(.accepted, status: .customerConsentedOrWasNotifiedWithoutNeedingConsent, expected: "ACCEPTED")
    }

    /// Row REFUND_REVERSED: Apple took the refund back: the chain is ACTIVE again, what the refund
    /// took is restored, and the app is told the entitlement is back.
    @Test func refundReversed() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        let purchase = try await Self.activeChain(harness)
        let chain = purchase.transactionId!
        var refunded = purchase
        refunded.revocationDate = TestPayloads.wholeMilliseconds(Date() - 3600)
        refunded.revocationReason = .refundedDueToIssue
        refunded.signedDate = TestPayloads.wholeMilliseconds(Date() - 3600)
        #expect(try await harness.outcome(of: try await harness.notify(.refund, transaction: refunded)) == .succeeded)
        #expect(try await harness.subscription(chain)?.status == "REVOKED")
        #expect(try await harness.balance("alice") == 0)
        let seq = try await Self.lastEvent(harness)

        var reversed = purchase
        reversed.signedDate = TestPayloads.wholeMilliseconds(Date() - 60)
        #expect(try await harness.outcome(of: try await harness.notify(.refundReversed, transaction: reversed)) == .succeeded)
        #expect(try await harness.subscription(chain)?.status == "ACTIVE")
        #expect(try await harness.balance("alice") == 1000)
        #expect(
            try await harness.value(
                "SELECT revoked FROM credit_grant WHERE transaction_id = \(chain)", as: Bool.self) == false)
        let restored = try await Self.events(harness, after: seq)
        // A revoked chain does not renew; restored, it renews again, and the app hears both.
        #expect(Set(restored) == ["entitlement.granted", "credits.granted", "subscription.renewal_changed"], "\(restored)")
        #expect(restored.count == 3)
        #expect(
            try await harness.value(
                "SELECT data->>'reason' FROM outbound_event WHERE seq > \(seq) AND type = 'credits.granted'", as: String.self)
                == "REFUND_REVERSED")
        #expect(try await harness.count("SELECT count(*) FROM payment_order") == 1, "no new order")
        try await harness.checkInvariants()
    }

    /// Row REFUND_DECLINED: Apple refused the customer's refund request: recorded, nothing moves.
    @Test func refundDeclined() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        let purchase = try await Self.activeChain(harness)
        let before = try await Self.snapshot(harness)
        var declined = purchase
        declined.signedDate = TestPayloads.wholeMilliseconds(Date() - 60)
        let uuid = try await harness.notify(.refundDeclined, transaction: declined)
        #expect(try await harness.outcome(of: uuid) == .succeeded)
        #expect(
            try await harness.value(
                "SELECT notification_type FROM inbound_event WHERE notification_uuid = \(uuid)", as: String.self) == "REFUND_DECLINED")
        #expect(try await Self.snapshot(harness) == before)
        #expect(try await harness.subscription(purchase.transactionId!)?.status == "ACTIVE")
        try await harness.checkInvariants()
    }

    /// Signs RESCIND_CONSENT for the Apple Account `account` and POSTs it; returns its UUID.
    static func rescindConsent(_ harness: WorkerHarness, account: String) async throws -> String {
        var app = AppTransaction()
        app.receiptType = .sandbox
        app.bundleId = IngressHarness.bundleID
        app.appTransactionId = account
        app.receiptCreationDate = TestPayloads.wholeMilliseconds(Date() - 60)
        app.originalPurchaseDate = TestPayloads.wholeMilliseconds(Date() - 90 * day)
        app.originalApplicationVersion = "1"
        var appData = AppData()
        appData.environment = .sandbox
        appData.bundleId = IngressHarness.bundleID
        appData.signedAppTransactionInfo = try harness.signer.sign(app)
        var payload = ResponseBodyV2DecodedPayload()
        payload.notificationType = .rescindConsent
        payload.notificationUUID = UUID().uuidString.lowercased()
        payload.version = "2.0"
        payload.signedDate = TestPayloads.wholeMilliseconds(Date())
        payload.appData = appData
        let response = try await harness.client.post(
            "/api/v1/iap/apple/notifications/sandbox", json: ["signedPayload": try harness.signer.sign(payload)])
        #expect(response.status == 200, "\(response.text)")
        return payload.notificationUUID!
    }

    /// The active entitlements a user's own `GET /api/v1/entitlements` lists.
    static func activeEntitlements(_ harness: WorkerHarness, _ user: String) async throws -> [String] {
        let response = try await harness.client.get(
            "/api/v1/entitlements", headers: ["Authorization": "Bearer \(harness.ingress.userToken(user))"])
        #expect(response.status == 200, "\(response.text)")
        let items = try #require(try response.json()["entitlements"] as? [[String: Any]])
        return items.filter { $0["active"] as? Bool == true }.compactMap { $0["entitlement"] as? String }
    }

    /// Row RESCIND_CONSENT: a parent withdrew consent on the Apple Account alice bought with:
    /// alice's entitlements are off, her consent to share consumption data is gone, one audit row
    /// and one `account.consent_rescinded`; her purchase and credits stay; bob (another Apple
    /// Account) is untouched; a redelivery adds nothing.
    @Test func rescindConsent() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        let now = Date()
        let account = Self.id()
        var bought: [String: JWSTransactionDecodedPayload] = [:]
        for (user, appTransaction) in [("alice", account), ("bob", Self.id())] {
            let token = try await harness.user(user)
            var purchase = harness.transaction(Self.id(), purchase: now - Self.day, token: token, signed: now - Self.hour)
            purchase.appTransactionId = appTransaction
            #expect(
                try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
            try await harness.pool.query(
                "INSERT INTO user_consent (user_id, purpose, granted, recorded_by) VALUES (\(user), 'CONSUMPTION_DATA', true, \(user))")
            bought[user] = purchase
        }
        #expect(try await Self.activeEntitlements(harness, "alice") == [WorkerHarness.starter])
        let seq = try await Self.lastEvent(harness)

        let uuid = try await Self.rescindConsent(harness, account: account)
        #expect(try await harness.outcome(of: uuid) == .succeeded)
        #expect(try await Self.activeEntitlements(harness, "alice").isEmpty)
        #expect(try await Self.activeEntitlements(harness, "bob") == [WorkerHarness.starter])
        #expect(
            try await harness.value(
                "SELECT string_agg(user_id, ',' ORDER BY user_id) FROM user_consent", as: String.self) == "bob")
        #expect(try await Self.events(harness, after: seq) == ["account.consent_rescinded"])
        let data = try #require(
            try await harness.value("SELECT data::text FROM outbound_event WHERE seq > \(seq)", as: String.self))
        let event = try #require(try JSONSerialization.jsonObject(with: Data(data.utf8)) as? [String: Any])
        #expect(event["appTransactionId"] as? String == account)
        #expect(event["entitlements"] as? [String] == [WorkerHarness.starter])
        #expect(event["removed"] as? [String] == ["CONSUMPTION_DATA_CONSENT"])
        #expect(event["notificationUUID"] as? String == uuid)
        // As the relay publishes it, against the envelope and the type's JSON Schema.
        #expect(try await Self.published(harness, "account.consent_rescinded")["appTransactionId"] as? String == account)
        #expect(
            try await harness.value(
                "SELECT user_id FROM outbound_event WHERE seq > \(seq)", as: String.self) == "alice")
        #expect(
            try await harness.value(
                "SELECT operator || ':' || action || ':' || (after->>'userId') FROM audit_log WHERE action = 'CONSENT_RESCINDED'",
                as: String.self) == "apple:CONSENT_RESCINDED:alice")
        // The purchase is the record of what was paid: the chain and its credits stay.
        #expect(try await harness.subscription(bought["alice"]!.transactionId!)?.status == "ACTIVE")
        #expect(try await harness.balance("alice") == 1000)

        // Apple delivers it again: nothing new.
        #expect(try await harness.outcome(of: try await Self.rescindConsent(harness, account: account)) == .succeeded)
        #expect(try await Self.events(harness, after: seq).count == 1)
        #expect(try await harness.count("SELECT count(*) FROM audit_log WHERE action = 'CONSENT_RESCINDED'") == 1)
        #expect(
            try await harness.metric(#"subs_consent_rescinded_total{outcome="rescinded"}"#, reaching: 1) == 1)
        try await harness.checkInvariants()
    }

    /// The newest event of `type` as the relay publishes it, checked against the envelope and the
    /// type's JSON Schema; its `data`.
    static func published(_ harness: WorkerHarness, _ type: String) async throws -> [String: Any] {
        let published = try #require(
            try await harness.value(
                """
                SELECT json_build_object('id', id, 'type', type, 'userId', user_id, 'sequence', sequence,
                                         'environment', environment, 'data', data,
                                         'occurredAt', to_char(occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))::text
                  FROM outbound_event WHERE type = \(type) ORDER BY seq DESC LIMIT 1
                """, as: String.self))
        #expect(try OutboundEventsTests.validate([published]) == [])
        let event = try #require(try JSONSerialization.jsonObject(with: Data(published.utf8)) as? [String: Any])
        return try #require(event["data"] as? [String: Any])
    }

    /// After a rescission Apple's facts still apply (the renewal is paid, its credits booked) but
    /// no event announces access the read API denies: no `entitlement.renewed`, no promotional
    /// `entitlement.granted`. Restored, the account hears `account.consent_restored` naming what is
    /// in force again; a later renewal is announced again; the rescission Apple signed before the
    /// restore, replayed, withdraws nothing, while a new one does.
    @Test func eventsAfterARescissionAndAfterItsRestore() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        let now = Date()
        let account = Self.id()
        let token = try await harness.user("alice")
        let chain = Self.id()
        var purchase = harness.transaction(chain, purchase: now - 10 * Self.day, token: token, signed: now - 3 * Self.hour)
        purchase.appTransactionId = account
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
        let rescission = try await Self.rescindConsent(harness, account: account)
        #expect(try await harness.outcome(of: rescission) == .succeeded)
        #expect(try await Self.activeEntitlements(harness, "alice").isEmpty)

        // Apple renews the chain: applied and paid, not announced as access.
        var seq = try await Self.lastEvent(harness)
        var renewal = harness.transaction(
            Self.id(), original: chain, purchase: now - Self.day, token: token, reason: .renewal, signed: now - 2 * Self.hour)
        renewal.appTransactionId = account
        #expect(try await harness.outcome(of: try await harness.notify(.didRenew, transaction: renewal)) == .succeeded)
        #expect(try await harness.subscription(chain)?.lastTransactionID == renewal.transactionId)
        #expect(try await Self.events(harness, after: seq) == ["order.fulfilled", "credits.granted"])
        // An operator's promotional grant: stored and audited, not announced either.
        seq = try await Self.lastEvent(harness)
        _ = try await EntitlementStore(pool: harness.pool).grant(
            userID: "alice", entitlement: "beta", expiresAt: Date() + 7 * Self.day, environment: "Sandbox", operator: "carol",
            reason: "apology", now: Date())
        #expect(try await Self.events(harness, after: seq).isEmpty)
        #expect(try await harness.count("SELECT count(*) FROM audit_log WHERE action = 'ENTITLEMENT_GRANTED'") == 1)
        #expect(try await Self.activeEntitlements(harness, "alice").isEmpty)

        // Restored: the entitlements read as the chain and the grant say, and the app is told so.
        seq = try await Self.lastEvent(harness)
        let restored = try await UserStore(pool: harness.pool).restoreConsent(
            userID: "alice", environment: "Sandbox", operator: "carol", reason: "parent consented again", now: Date())
        #expect(restored.entitlements == ["beta", WorkerHarness.starter].sorted())
        #expect(try await Self.activeEntitlements(harness, "alice").sorted() == ["beta", WorkerHarness.starter].sorted())
        #expect(try await Self.events(harness, after: seq) == ["account.consent_restored"])
        let data = try await Self.published(harness, "account.consent_restored")
        #expect(data["entitlements"] as? [String] == ["beta", WorkerHarness.starter].sorted())
        #expect(data["operator"] as? String == "carol" && data["reason"] as? String == "parent consented again")
        #expect(try await harness.count("SELECT count(*) FROM audit_log WHERE action = 'CONSENT_RESTORED'") == 1)

        // The next renewal is announced again.
        seq = try await Self.lastEvent(harness)
        let next = harness.transaction(
            Self.id(), original: chain, purchase: now - Self.hour, token: token, reason: .renewal, signed: now - Self.hour)
        #expect(try await harness.outcome(of: try await harness.notify(.didRenew, transaction: next)) == .succeeded)
        #expect(try await Self.events(harness, after: seq) == ["entitlement.renewed", "order.fulfilled", "credits.granted"])

        // The rescission the operator answered, replayed, withdraws nothing; a new one does.
        let users = UserStore(pool: harness.pool)
        let replayed = try await users.rescindConsent(
            appTransactionID: account, environment: "Sandbox", notificationUUID: rescission, signedAt: restored.restoredAt - 60,
            events: true, now: Date())
        #expect(replayed.isEmpty)
        #expect(try await Self.activeEntitlements(harness, "alice").count == 2)
        #expect(try await harness.outcome(of: try await Self.rescindConsent(harness, account: account)) == .succeeded)
        #expect(try await Self.activeEntitlements(harness, "alice").isEmpty)
        #expect(try await harness.count("SELECT count(*) FROM audit_log WHERE action = 'CONSENT_RESCINDED'") == 2)
        try await harness.checkInvariants()
    }
}
