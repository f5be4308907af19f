import AppStore
import AppStoreTestSupport
import Crypto
import Domain
import Foundation
import FulfillmentApp
import Postgres
import ServiceRuntime
import TestSupport
import Testing

/// The pair with Apple's App Store Server API played by the mock: the workers answer consumption
/// requests, re-query chains, recover notification history and expire stale orders.
struct SchedulerHarness {
    let pair: WorkerHarness
    let mock: MockAppStoreServerAPI
    /// A worker's environment: the ingress's plus the API key and the mock's address.
    let workerEnvironment: [String: String]

    /// Starts the ingress, the mock and `workers` workers that call the mock.
    static func start(workers count: Int = 1, extra: [String: String] = [:]) async throws -> SchedulerHarness {
        let ingressOnly = try await WorkerHarness.start(workers: 0)
        let key = P256PrivateKey.generate()
        let keyPath = FileManager.default.temporaryDirectory.appendingPathComponent("api-key-\(UUID().uuidString).p8")
        try Data(key.pemPKCS8().utf8).write(to: keyPath)
        let mock = MockAppStoreServerAPI(
            signer: ingressOnly.signer,
            credentials: .init(issuerId: "issuer-e2e", keyId: "KEYE2E01", bundleId: IngressHarness.bundleID, publicKey: key.publicKey),
            environment: .sandbox)
        let url = try mock.start().absoluteString
        let environment = ingressOnly.ingress.environment.merging(
            [
                "APPLE_IAP_ISSUER_ID": "issuer-e2e", "APPLE_IAP_KEY_ID": "KEYE2E01", "APPLE_IAP_PRIVATE_KEY_PATH": keyPath.path,
                "APPLE_IAP_API_BASE_URL_PRODUCTION": url, "APPLE_IAP_API_BASE_URL_SANDBOX": url,
                "FULFILLMENT_SCHEDULER_INTERVAL_MS": "200", "FULFILLMENT_REQUERY_SCAN_SECONDS": "1",
                // The scheduled checks of Apple run only in the tests about them (they would add
                // tasks and history calls to every other test's counts).
                "FULFILLMENT_FAILED_DELIVERY_INTERVAL_SECONDS": "0", "FULFILLMENT_EXPIRY_REQUERY_INTERVAL_SECONDS": "0",
            ].merging(extra) { _, new in new }
        ) { _, new in new }
        var workers: [ServiceProcess] = []
        for index in 0..<count {
            workers.append(try await WorkerHarness.launchWorker(environment, name: "worker-\(index)"))
        }
        return SchedulerHarness(
            pair: WorkerHarness(ingress: ingressOnly.ingress, workers: workers), mock: mock, workerEnvironment: environment)
    }

    func stop() {
        pair.stop()
        let mock = mock
        Task { await mock.shutdown() }
    }

    /// Runs `subsctl` against the slice's database; its exit status and output.
    func subsctl(_ arguments: [String]) async throws -> (status: Int32?, output: String) { try await pair.subsctl(arguments) }

    /// Runs `subsctl` with a worker's settings (the App Store Server API key and the mock's address).
    func subsctlWithAPIKey(_ arguments: [String]) async throws -> (status: Int32?, output: String) {
        let process = try ServiceProcess(executable: "subsctl", name: "subsctl", environment: workerEnvironment, arguments: arguments)
        let status = await process.waitForExit(timeout: 120)
        return (status, process.output)
    }

    /// A notification as Apple keeps it in its history (signed, with its delivery attempts).
    func historyNotification(
        _ type: NotificationTypeV2, _ subtype: Subtype? = nil, transaction: JWSTransactionDecodedPayload,
        renewal: JWSRenewalInfoDecodedPayload? = nil, delivered: Bool
    ) throws -> (uuid: String, signedPayload: String) {
        let uuid = UUID()
        let jws = try pair.signer.signNotification(
            type: type, subtype: subtype, bundleId: IngressHarness.bundleID, environment: .sandbox, transaction: transaction,
            renewalInfo: renewal, notificationUUID: uuid)
        mock.addNotification(
            signedPayload: jws,
            attempts: [SendAttemptItem(attemptDate: Date(), sendAttemptResult: delivered ? "SUCCESS" : "NO_RESPONSE")])
        return (uuid.uuidString.lowercased(), jws)
    }
}

@Suite(.serialized, .timeLimit(.minutes(5)))
struct FulfillmentSchedulerTests {
    static func id() -> String { String(UInt64.random(in: 2_000_000_000_000_000...2_999_999_999_999_999)) }

    /// CONSUMPTION_REQUEST is answered through Send Consumption Information only for a user who
    /// consented; a network failure retries the event; the answer is given once per notification.
    @Test func consumptionRequestsAreAnsweredOnlyWithConsentAndOnce() async throws {
        let harness = try await SchedulerHarness.start(extra: [
            "FULFILLMENT_RETRY_BASE_MS": "100", "FULFILLMENT_RETRY_MAX_MS": "300",
        ])
        defer { harness.stop() }
        let pair = harness.pair
        try await pair.pool.query("UPDATE payment_product SET refund_preference = 'GRANT_PRORATED'")
        var purchases: [String: JWSTransactionDecodedPayload] = [:]
        let consent = "/api/v1/subscriptions/consumption-consent"
        for (user, choice) in [("alice", "granted"), ("bob", "denied"), ("carol", nil)] {
            let token = try await pair.user(user)
            let purchase = pair.transaction(Self.id(), token: token)
            try harness.mock.addTransaction(purchase)
            #expect(try await pair.outcome(of: try await pair.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
            purchases[user] = purchase
            let auth = ["Authorization": "Bearer \(pair.ingress.userToken(user))"]
            #expect(try await pair.client.get(consent, headers: auth).text == #"{"consumptionData":"UNKNOWN"}"#)
            if choice == "granted" {
                // The user's own choice through the app.
                let put = try await pair.client.send("PUT", consent, json: ["consumptionData": "GRANTED"], headers: auth)
                #expect(put.status == 200 && put.text == #"{"consumptionData":"GRANTED"}"#, "\(put.status) \(put.text)")
            } else if let choice {
                // An operator recording a choice made elsewhere (support, another channel).
                let run = try await harness.subsctl(["consent", "--user-id", user, "--consumption-data", choice, "--operator", "e2e"])
                #expect(run.status == 0, "\(run.output)")
                #expect(run.output.contains("user=\(user) consumptionData=\(choice) (was unknown)"), "\(run.output)")
            }
            #expect(try await pair.client.get(consent, headers: auth).text.contains((choice ?? "unknown").uppercased()))
        }
        #expect(try await pair.client.get(consent).status == 401)
        let malformed = try await pair.client.request(
            "PUT", consent, headers: ["Authorization": "Bearer \(pair.ingress.userToken("carol"))"],
            body: Data(#"{"consumptionData":"YES"}"#.utf8))
        #expect(malformed.status == 400 && malformed.text.contains("MALFORMED_JSON"), "\(malformed.text)")
        #expect(
            try await pair.value(
                "SELECT string_agg(operator, ',' ORDER BY operator) FROM audit_log WHERE action = 'CONSENT_RECORDED'", as: String.self)
                == "e2e,user")

        // Apple's endpoint fails more often than the client retries within one call: the event waits and retries.
        let path = "/inApps/v2/transactions/consumption/"
        harness.mock.enqueue(
            .init(status: 503, pathPrefix: path), .init(status: 503, pathPrefix: path), .init(status: 503, pathPrefix: path),
            .init(status: 503, pathPrefix: path))
        var requests: [String: String] = [:]
        for user in ["alice", "bob", "carol"] {
            requests[user] = try await pair.notify(.consumptionRequest, transaction: purchases[user]!)
            #expect(try await pair.outcome(of: requests[user]!, timeout: 60) == .succeeded)
        }
        #expect(
            try await pair.value(
                "SELECT retry_count FROM inbound_event WHERE kind = 'notification' AND notification_uuid = \(requests["alice"]!)", as: Int.self)! >= 1
        )
        let alice = try #require(harness.mock.consumptionData(for: purchases["alice"]!.transactionId!))
        #expect(alice.customerConsented == true)
        #expect(alice.deliveryStatus == "DELIVERED")
        #expect(alice.sampleContentProvided == false)
        #expect(alice.consumptionPercentage == 0, "none of the purchase's credits were used (its lot is whole)")
        #expect(alice.refundPreference == "GRANT_PRORATED", "the catalogue's preference for the product")
        #expect(harness.mock.consumptionData(for: purchases["bob"]!.transactionId!) == nil)
        #expect(harness.mock.consumptionData(for: purchases["carol"]!.transactionId!) == nil)
        #expect(
            try await pair.value(
                "SELECT string_agg(user_id || ':' || outcome, ',' ORDER BY user_id) FROM consumption_answer", as: String.self)
                == "alice:SENT,bob:NO_CONSENT,carol:CONSENT_UNKNOWN")
        let puts = { harness.mock.requests.filter { $0.method == "PUT" && $0.path.hasPrefix(path) }.count }
        #expect(puts() == 5, "four refused by the scripted faults, then the answer")

        // A worker that died after answering, before completing the event: the next one answers nothing.
        try await pair.pool.query(
            """
            WITH crashed AS (
                UPDATE inbound_event
                   SET process_status = 'PROCESSING', lease_owner = 'crashed', lease_expires_at = now() - interval '1 second'
                 WHERE notification_uuid = \(requests["alice"]!) RETURNING id)
            DELETE FROM processed_event WHERE event_kind = 'notification' AND event_id IN (SELECT id FROM crashed)
            """)
        #expect(try await pair.outcome(of: requests["alice"]!, timeout: 60) == .succeeded)
        #expect(puts() == 5)
        #expect(try await pair.count("SELECT count(*) FROM consumption_answer") == 3)
        #expect(try await pair.metric(#"subs_consumption_answers_total{outcome="SENT"}"#, reaching: 1) == 1)
        try await pair.checkInvariants()
    }

    /// A chain whose renewal info names another product than its current transaction is flagged
    /// and re-projected from Get All Subscription Statuses (the missed upgrade applied once); an
    /// operator's `subsctl requery` brings in a missed renewal, and asking again changes nothing.
    @Test func requeryFixesDisagreeingChainsAndOperatorRequests() async throws {
        let harness = try await SchedulerHarness.start()
        defer { harness.stop() }
        let pair = harness.pair
        let now = Date()
        let day: TimeInterval = 86_400

        // Alice bought starter; Apple upgraded her to pro, but that notification never came.
        let aliceToken = try await pair.user("alice")
        let chain = Self.id()
        let starter = pair.transaction(chain, purchase: now - 5 * day, token: aliceToken, signed: now - 3600)
        #expect(
            try await pair.outcome(
                of: try await pair.notify(
                    .subscribed, .initialBuy, transaction: starter, renewal: pair.renewalInfo(original: chain, signed: now - 3600))) == .succeeded)
        let upgrade = pair.transaction(Self.id(), original: chain, product: WorkerHarness.pro, purchase: now, token: aliceToken)
        try harness.mock.addTransaction(starter)
        try harness.mock.addTransaction(upgrade, renewalInfo: pair.renewalInfo(original: chain, product: WorkerHarness.pro))
        // A later notification carries renewal info naming pro beside the old starter transaction.
        let hint = try await pair.notify(
            .didChangeRenewalStatus, .autoRenewEnabled, transaction: starter,
            renewal: pair.renewalInfo(original: chain, product: WorkerHarness.pro, signed: now - 30))
        #expect(try await pair.outcome(of: hint) == .succeeded)
        let fixed = try await eventually(timeout: 60) {
            try await pair.subscription(chain)?.activeProductID == WorkerHarness.pro
        }
        #expect(fixed, "the chain was re-projected from Apple's answer")
        let done = try await eventually(timeout: 30) {
            try await pair.value(
                "SELECT status || ':' || reason FROM fulfillment_task WHERE original_transaction_id = \(chain)", as: String.self)
                == "DONE:FACTS_DISAGREE: renewal info names \(WorkerHarness.pro), current transaction \(WorkerHarness.starter)"
        }
        #expect(done, "one re-query, flagged for the disagreement, done")
        let requeried = try #require(
            try await pair.value(
                "SELECT notification_uuid FROM inbound_event WHERE kind = 'notification' AND notification_type = 'STATUS_REQUERY' AND original_transaction_id = \(chain)",
                as: String.self))
        #expect(try await pair.outcome(of: requeried) == .succeeded)
        #expect(
            try await pair.value(
                "SELECT order_type || ':' || status FROM payment_order WHERE transaction_id = \(upgrade.transactionId!)", as: String.self)
                == "CHANGE:FULFILLED")
        #expect(try await pair.balance("alice") == 3000, "starter 1000 + the upgrade's difference 2000")
        #expect(
            try await pair.value(
                "SELECT cause FROM status_history WHERE entity_key = \(upgrade.transactionId.map { "CHG-S-" + $0 }!) ORDER BY id DESC LIMIT 1",
                as: String.self) == "apple.STATUS_REQUERY")
        #expect(try await pair.metric("subs_requery_flagged_total", reaching: 1) == 1)

        // Bob's renewal notification was lost; an operator asks for a re-query.
        let bobToken = try await pair.user("bob")
        let bobChain = Self.id()
        let first = pair.transaction(bobChain, purchase: now - 40 * day, token: bobToken, signed: now - 7200)
        #expect(try await pair.outcome(of: try await pair.notify(.subscribed, .initialBuy, transaction: first)) == .succeeded)
        #expect(try await pair.subscription(bobChain)?.status == "EXPIRED")
        let renewal = pair.transaction(
            Self.id(), original: bobChain, purchase: now - 10 * day, token: bobToken, reason: .renewal, signed: now - 600)
        try harness.mock.addTransaction(first)
        try harness.mock.addTransaction(renewal, renewalInfo: pair.renewalInfo(original: bobChain))
        let run = try await harness.subsctl(["requery", "--original-transaction-id", bobChain, "--env", "Sandbox", "--operator", "e2e"])
        #expect(run.status == 0, "\(run.output)")
        #expect(run.output.contains("status=DONE fetched=1 stored=1 duplicates=0"), "\(run.output)")
        #expect(run.output.contains("subscription=Sandbox:\(bobChain) status=ACTIVE product=\(WorkerHarness.starter)"), "\(run.output)")
        #expect(run.output.contains(" status=SUCCEEDED"), "the command waited for Apple's answer to be applied: \(run.output)")
        #expect(
            try await pair.value(
                "SELECT order_type FROM payment_order WHERE transaction_id = \(renewal.transactionId!)", as: String.self) == "RENEWAL")
        #expect(try await pair.balance("bob") == 2000)

        let again = try await harness.subsctl(["requery", "--original-transaction-id", bobChain, "--env", "Sandbox"])
        #expect(again.status == 0, "\(again.output)")
        #expect(again.output.contains("status=ACTIVE"), "\(again.output)")
        #expect(try await pair.balance("bob") == 2000)
        #expect(try await pair.count("SELECT count(*) FROM credit_grant WHERE user_id = 'bob'") == 2)
        #expect(try await pair.count("SELECT count(*) FROM audit_log WHERE action = 'REQUERY_REQUESTED'") == 2)
        // Each audit row holds the task as stored, less its result.
        #expect(
            try await pair.count(
                "SELECT count(*) FROM audit_log WHERE action = 'REQUERY_REQUESTED' AND after ? 'id' AND after ? 'status' AND NOT after ? 'result'"
            ) == 2)
        let unknown = try await harness.subsctl(["requery", "--original-transaction-id", "999", "--env", "Sandbox", "--wait", "60"])
        #expect(unknown.status == 1, "\(unknown.output)")
        #expect(unknown.output.contains("status=FAILED error=APPSTORE_API_4040010"), "\(unknown.output)")
        try await pair.checkInvariants()
    }

    /// Scenario 22: the service is down while Apple sends. At start-up the worker recovers the
    /// recent notification history; Apple's late retry is a duplicate; `subsctl recover` over the
    /// same range, twice, writes nothing. Every fact is applied once.
    @Test func notificationsSentDuringAnOutageAreRecoveredOnce() async throws {
        let harness = try await SchedulerHarness.start(extra: ["FULFILLMENT_RECOVERY_WINDOW_HOURS": "1"])
        defer { harness.stop() }
        let pair = harness.pair
        let now = Date()
        let day: TimeInterval = 86_400
        let token = try await pair.user("alice")
        let chain = Self.id()
        let purchase = pair.transaction(chain, purchase: now - 29 * day, token: token, signed: now - 7200)
        let delivered = try harness.historyNotification(.subscribed, .initialBuy, transaction: purchase, delivered: true)
        #expect(
            try await pair.client.post(
                "/api/v1/iap/apple/notifications/sandbox", json: ["signedPayload": delivered.signedPayload]
            ).status == 200)
        #expect(try await pair.outcome(of: delivered.uuid) == .succeeded)

        // Down: the ingress and the worker are gone while Apple sends a renewal and a renewal-status change.
        pair.stop()
        let renewal = pair.transaction(
            Self.id(), original: chain, purchase: now - 3600, token: token, reason: .renewal, signed: now - 1800)
        let renewed = try harness.historyNotification(
            .didRenew, transaction: renewal, renewal: pair.renewalInfo(original: chain, signed: now - 1800), delivered: false)
        let disabled = try harness.historyNotification(
            .didChangeRenewalStatus, .autoRenewDisabled, transaction: renewal,
            renewal: pair.renewalInfo(original: chain, autoRenew: false, signed: now - 900), delivered: false)

        // Back up: the new worker recovers the last hour of history at start-up.
        let ingress = try await IngressHarness.launch(pair.ingress.environment)
        defer { ingress.kill() }
        let worker = try await WorkerHarness.launchWorker(harness.workerEnvironment, name: "worker-restarted")
        defer { worker.kill() }
        let restarted = WorkerHarness(
            ingress: IngressHarness(
                pipeline: pair.ingress.pipeline, signer: pair.signer, process: ingress, client: TestHTTPClient(port: ingress.httpPort!),
                internalClient: TestHTTPClient(port: ingress.internalHTTPPort!),
                userTokenSecret: pair.ingress.userTokenSecret, pool: pair.pool, environment: pair.ingress.environment),
            workers: [worker])
        #expect(try await restarted.outcome(of: renewed.uuid, timeout: 60) == .succeeded)
        #expect(try await restarted.outcome(of: disabled.uuid, timeout: 60) == .succeeded)
        let recovered = try await eventually(timeout: 30) {
            try await restarted.count("SELECT count(*) FROM fulfillment_task WHERE kind = 'RECOVERY' AND status <> 'DONE'") == 0
        }
        #expect(recovered, "every start-up recovery is DONE")
        #expect(
            try await restarted.value(
                "SELECT (result->>'stored') || '/' || (result->>'duplicates') FROM fulfillment_task WHERE kind = 'RECOVERY' ORDER BY id DESC LIMIT 1",
                as: String.self) == "2/1")
        let subscription = try #require(try await restarted.subscription(chain))
        #expect(subscription.status == "ACTIVE")
        #expect(subscription.lastTransactionID == renewal.transactionId)
        #expect(!subscription.autoRenewEnabled)
        #expect(try await restarted.balance("alice") == 2000)

        // Apple's own retry of the renewal arrives later: a duplicate, acknowledged.
        let retry = try await restarted.client.post(
            "/api/v1/iap/apple/notifications/sandbox", json: ["signedPayload": renewed.signedPayload])
        #expect(retry.status == 200)
        #expect((try retry.json()["status"] as? String) == "duplicate")

        // An operator recovers the same range twice: nothing new either time.
        let range = ["--from", RFC3339.string(from: now - 7200), "--to", RFC3339.string(from: Date()), "--env", "Sandbox"]
        let snapshot = """
            SELECT (SELECT count(*) FROM inbound_event WHERE kind = 'notification') || '/' || (SELECT count(*) FROM credit_grant) || '/'
                   || (SELECT count(*) FROM credit_ledger) || '/' || (SELECT count(*) FROM payment_order) || '/'
                   || (SELECT count(*) FROM status_history)
            """
        let before = try await restarted.value(PostgresQuery(unsafeSQL: snapshot), as: String.self)
        for _ in 0..<2 {
            let run = try await harness.subsctl(["recover"] + range + ["--operator", "e2e", "--reason", "outage"])
            #expect(run.status == 0, "\(run.output)")
            #expect(run.output.contains("status=DONE pages=2 fetched=3 stored=0 duplicates=3 refused=0"), "\(run.output)")
        }
        #expect(try await restarted.value(PostgresQuery(unsafeSQL: snapshot), as: String.self) == before)
        #expect(try await restarted.count("SELECT count(*) FROM credit_grant") == 2)
        #expect(try await restarted.count("SELECT count(*) FROM payment_order WHERE order_type = 'RENEWAL'") == 1)
        #expect(try await restarted.count("SELECT count(*) FROM audit_log WHERE action = 'RECOVERY_REQUESTED'") == 2)
        let refused = try await harness.subsctl(["recover", "--from", "2020-01-01T00:00:00Z", "--to", "2020-01-02T00:00:00Z", "--env", "Sandbox"])
        #expect(refused.status == 64, "Apple keeps 30 days of Sandbox history: \(refused.output)")
        try await restarted.checkInvariants()
    }

    /// Open purchase orders past FULFILLMENT_ORDER_EXPIRY_MINUTES are EXPIRED once, with two
    /// workers scheduling; a real charge arriving later gets a RECOVERY order.
    @Test func staleOrdersExpireOnceAndALateChargeStillCounts() async throws {
        let pair = try await WorkerHarness.start(
            workers: 2, extra: ["FULFILLMENT_ORDER_EXPIRY_MINUTES": "60", "FULFILLMENT_SCHEDULER_INTERVAL_MS": "100"])
        defer { pair.stop() }
        let (stale, token) = try await pair.order("alice")
        let (fresh, _) = try await pair.order("bob")
        let (pending, _) = try await pair.order("carol")
        // One statement: the schedulers run every 100 ms and must never see carol's order old but still CREATED.
        try await pair.pool.query(
            """
            UPDATE payment_order SET created_at = now() - interval '2 hours',
                   status = CASE WHEN order_no = \(pending) THEN 'PENDING' ELSE status END
             WHERE order_no IN (\(stale), \(pending))
            """)
        let expired = try await eventually(timeout: 30) {
            try await pair.count("SELECT count(*) FROM payment_order WHERE status = 'EXPIRED'") == 2
        }
        #expect(expired)
        #expect(
            try await pair.value(
                "SELECT string_agg(entity_key || ':' || previous_status || '>' || current_status || ':' || cause, ',' ORDER BY entity_key) FROM status_history WHERE cause = 'order.stale'",
                as: String.self)
                == [stale + ":CREATED>EXPIRED:order.stale", pending + ":PENDING>EXPIRED:order.stale"].sorted().joined(separator: ","))
        #expect(try await pair.value("SELECT status FROM payment_order WHERE order_no = \(fresh)", as: String.self) == "CREATED")

        // Alice paid after all: the charge counts, as a RECOVERY order; her expired intent stays closed.
        let id = Self.id()
        #expect(
            try await pair.outcome(of: try await pair.notify(.subscribed, .initialBuy, transaction: pair.transaction(id, token: token))) == .succeeded
        )
        #expect(try await pair.value("SELECT status FROM payment_order WHERE order_no = \(stale)", as: String.self) == "EXPIRED")
        #expect(try await pair.value("SELECT order_type FROM payment_order WHERE transaction_id = \(id)", as: String.self) == "RECOVERY")
        #expect(try await pair.balance("alice") == 1000)
        try await pair.checkInvariants()
    }
}

/// The consumption answer built from what the service knows.
@Suite struct ConsumptionReportTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    func facts(granted: Int64?, used: Int64 = 0, trial: Bool = false, preference: RefundPreference? = nil) -> ConsumptionFacts {
        ConsumptionFacts(
            granted: granted.map { $0 * 1_000_000 }, used: used * 1_000_000, hadFreeTrial: trial, delivered: granted != nil,
            accountCreated: now, appAccountToken: nil, refundPreference: preference)
    }

    /// Send Consumption Information's request: consent true, how much of the transaction's credits
    /// its lots used (milliunits), delivery, the trial as a sample, the catalogue's refund preference.
    @Test func theAnswerCarriesApplesFieldsOnly() {
        let delivered = ConsumptionReport.request(facts(granted: 1000, used: 250, trial: true, preference: .grantProrated))
        #expect(
            delivered
                == ConsumptionRequest(
                    customerConsented: true, consumptionPercentage: 25_000, deliveryStatus: "DELIVERED",
                    refundPreference: "GRANT_PRORATED", sampleContentProvided: true))
        let nothing = ConsumptionReport.request(facts(granted: nil))
        #expect(
            nothing == ConsumptionRequest(customerConsented: true, deliveryStatus: "UNDELIVERED_OTHER", sampleContentProvided: false))
        #expect(RefundPreference.allCases.map(\.rawValue) == ["DECLINE", "GRANT_FULL", "GRANT_PRORATED"])
    }

    @Test func theConsumptionPercentageIsTheUsedShareInMilliunitsRoundedDown() {
        #expect(ConsumptionReport.consumptionPercentage(used: 0, granted: 1000) == 0)
        #expect(ConsumptionReport.consumptionPercentage(used: 1000, granted: 1000) == 100_000)
        #expect(ConsumptionReport.consumptionPercentage(used: 1, granted: 3) == 33_333)
        #expect(ConsumptionReport.consumptionPercentage(used: 5000, granted: 1000) == 100_000, "never above 100%")
        #expect(ConsumptionReport.consumptionPercentage(used: 10, granted: nil) == nil)
        #expect(ConsumptionReport.consumptionPercentage(used: 0, granted: 0) == nil)
    }
}
