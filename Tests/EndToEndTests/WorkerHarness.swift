import AppStore
import AppStoreTestSupport
import Foundation
import FulfillmentApp
import Postgres
import ServiceRuntime
import TestSupport
import Testing

/// The real pair on a private slice of the services: an ingress and fulfillment workers sharing one
/// test signer and one payload key set, with what the scenarios need to play Apple and the app and
/// to read the evidence chain.
struct WorkerHarness {
    static let group = "21000000"
    static let starter = "com.example.starter.monthly"
    static let pro = "com.example.pro.monthly"
    static let proYearly = "com.example.pro.yearly"

    let ingress: IngressHarness
    let workers: [ServiceProcess]

    var pool: PostgresPool { ingress.pool }
    var signer: TestAppleSigner { ingress.signer }
    var client: TestHTTPClient { ingress.client }

    /// Starts the ingress and `workers` workers, seeds the catalogue of domain.md and waits until the
    /// workers have joined the consumer group.
    static func start(
        workers count: Int = 1, environment: AppStoreEnvironment = .sandbox, partitions: Int = 6,
        extra: [String: String] = [:]
    ) async throws -> WorkerHarness {
        let ingress = try await IngressHarness.start(environment: environment, partitions: partitions, extra: extra)
        var workers: [ServiceProcess] = []
        for index in 0..<count { workers.append(try await launchWorker(ingress.environment, name: "worker-\(index)")) }
        let harness = WorkerHarness(ingress: ingress, workers: workers)
        try await harness.seedCatalogue()
        return harness
    }

    /// Starts a worker with the ingress's settings and waits for its first partition assignment.
    static func launchWorker(_ environment: [String: String], name: String) async throws -> ServiceProcess {
        let worker = try ServiceProcess(
            executable: "fulfillment", name: name, environment: environment.merging(["WORKER_ID": name]) { _, new in new })
        guard await worker.waitForOutput("partition assignment changed", timeout: 60) else {
            worker.kill()
            throw MissingServiceError(variable: "a worker in the consumer group (log: \(worker.output.suffix(3000)))")
        }
        return worker
    }

    /// Kills the processes at once: a `defer` cannot await, and a process left to a task may outlive
    /// the test run. The pool's connections close with the test process.
    func stop() {
        for worker in workers { worker.kill() }
        ingress.process.kill()
    }

    func seedCatalogue() async throws {
        let products: [(String, Int, String, Int, String)] = [
            (Self.starter, 2, "P1M", 1000, "FULL"), (Self.pro, 1, "P1M", 3000, "DIFFERENCE"),
            (Self.proYearly, 1, "P1Y", 3000, "FULL"),
        ]
        for (product, level, duration, credits, upgrade) in products {
            try await addProduct(product, level: level, duration: duration, credits: credits, upgradeGrant: upgrade)
        }
    }

    func addProduct(
        _ product: String, level: Int = 2, duration: String = "P1M", credits: Int = 1000, upgradeGrant: String = "FULL"
    ) async throws {
        try await pool.query(
            """
            INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration,
                                         credits_amount, upgrade_grant)
            VALUES (\(IngressHarness.bundleID), \(product), \(Self.group), \(product), \(level), \(duration), \(credits),
                    \(upgradeGrant))
            """)
    }

    /// Runs `subsctl` against the harness's database; its exit status and output.
    func subsctl(_ arguments: [String]) async throws -> (status: Int32?, output: String) {
        let process = try ServiceProcess(
            executable: "subsctl", name: "subsctl",
            environment: ["DATABASE_URL": ingress.environment["DATABASE_URL"]!, "EVENT_TOPIC": ingress.pipeline.topic],
            arguments: arguments)
        let status = await process.waitForExit(timeout: 120)
        return (status, process.output)
    }

    /// A business user with a random appAccountToken, as the order endpoint would create it.
    @discardableResult
    func user(_ id: String, isTestUser: Bool = false) async throws -> UUID {
        let token = UUID()
        try await pool.query("INSERT INTO app_user (user_id, is_test_user) VALUES (\(id), \(isTestUser))")
        try await pool.query("INSERT INTO user_account_token (user_id, app_account_token) VALUES (\(id), \(token))")
        return token
    }

    /// A transaction of a chain, filled like Apple fills them.
    func transaction(
        _ id: String, original: String? = nil, product: String = starter, purchase: Date = Date(), days: Double = 30,
        token: UUID?, reason: TransactionReason = .purchase, signed: Date = Date(),
        environment: AppStoreEnvironment = .sandbox
    ) -> JWSTransactionDecodedPayload {
        var transaction = TestPayloads.transaction(
            bundleId: IngressHarness.bundleID, environment: environment, productId: product, transactionId: id,
            originalTransactionId: original ?? id, purchaseDate: purchase, expiresDate: purchase + days * 86_400,
            appAccountToken: token, signedDate: signed)
        transaction.transactionReason = reason
        return transaction
    }

    /// Renewal info of a chain.
    func renewalInfo(
        original: String, product: String = starter, autoRenewProduct: String? = nil, autoRenew: Bool = true,
        billingRetry: Bool = false, grace: Date? = nil, signed: Date = Date(), environment: AppStoreEnvironment = .sandbox
    ) -> JWSRenewalInfoDecodedPayload {
        var renewal = TestPayloads.renewalInfo(
            environment: environment, productId: product, originalTransactionId: original, autoRenew: autoRenew,
            signedDate: signed)
        renewal.autoRenewProductId = autoRenewProduct ?? product
        renewal.isInBillingRetryPeriod = billingRetry
        renewal.gracePeriodExpiresDate = grace.map(TestPayloads.wholeMilliseconds)
        return renewal
    }

    /// Signs a notification and POSTs it to the environment's endpoint; returns its UUID.
    @discardableResult
    func notify(
        _ type: NotificationTypeV2, _ subtype: Subtype? = nil, transaction: JWSTransactionDecodedPayload? = nil,
        renewal: JWSRenewalInfoDecodedPayload? = nil, environment: AppStoreEnvironment = .sandbox, signed: Date = Date()
    ) async throws -> String {
        let uuid = UUID()
        let jws = try signer.signNotification(
            type: type, subtype: subtype, bundleId: IngressHarness.bundleID,
            appAppleId: environment == .production ? 1_234_567_890 : nil, environment: environment,
            transaction: transaction, renewalInfo: renewal, signedDate: signed, notificationUUID: uuid)
        let path = "/api/v1/iap/apple/notifications/" + (environment == .production ? "production" : "sandbox")
        let response = try await client.post(path, json: ["signedPayload": jws])
        #expect(response.status == 200, "\(response.text)")
        return uuid.uuidString.lowercased()
    }

    /// Waits until the notification is SUCCEEDED or DEAD; returns its status and error code.
    func outcome(of uuid: String, timeout: TimeInterval = 30) async throws -> EventState {
        try await outcome("SELECT process_status, error_code FROM inbound_event WHERE kind = 'notification' AND notification_uuid = \(uuid)", timeout)
    }

    /// The same for the submissions of a transaction.
    func submissionOutcome(of transactionID: String, timeout: TimeInterval = 30) async throws -> EventState {
        try await outcome(
            "SELECT process_status, error_code FROM inbound_event WHERE kind = 'submission' AND transaction_id = \(transactionID) ORDER BY id DESC LIMIT 1",
            timeout)
    }

    private func outcome(_ query: PostgresQuery, _ timeout: TimeInterval) async throws -> EventState {
        var state = EventState(status: "MISSING", errorCode: nil)
        _ = try await eventually(timeout: timeout, every: .milliseconds(50)) {
            guard let row = try await pool.query(query).first else { return false }
            state = EventState(status: try row.decode("process_status"), errorCode: try row.decode("error_code", as: String?.self))
            return state.status == "SUCCEEDED" || state.status == "DEAD"
        }
        return state
    }

    /// POSTs a signed transaction for an order (or as observed when `orderNo` is nil) as `user`.
    func submit(_ jws: String, orderNo: String?, as user: String) async throws -> TestHTTPResponse {
        let path =
            orderNo.map { "/api/v1/subscriptions/orders/\($0)/apple-transaction" }
            ?? "/api/v1/subscriptions/apple-transactions/observed"
        return try await client.post(
            path, json: ["signedTransaction": jws], headers: ["Authorization": "Bearer \(ingress.userToken(user))"])
    }

    /// Creates an order through the API; returns its number and the user's appAccountToken.
    func order(_ user: String, product: String = starter) async throws -> (orderNo: String, token: UUID) {
        let response = try await client.post(
            "/api/v1/subscriptions/orders", json: ["productId": product, "requestId": UUID().uuidString],
            headers: ["Authorization": "Bearer \(ingress.userToken(user))"])
        #expect(response.status == 201, "\(response.text)")
        let body = try response.json()
        return (
            try #require(body["orderNo"] as? String),
            try #require((body["appAccountToken"] as? String).flatMap(UUID.init(uuidString:)))
        )
    }

    /// The value of a metric line (`name{labels}`) a worker exposes on `/metrics`; 0 when absent.
    /// A worker's metric once it shows `expected` (or its value after 10 s): a worker counts an
    /// event's outcome just after the commit a test reads it from, so a read at once can be early.
    func metric(_ line: String, reaching expected: Double, worker: Int = 0) async throws -> Double {
        var value = 0.0
        _ = try await eventually(timeout: 10, every: .milliseconds(50)) {
            value = try await metric(line, worker: worker)
            return value == expected
        }
        return value
    }

    func metric(_ line: String, worker: Int = 0) async throws -> Double {
        guard let port = workers[worker].httpPort else { throw MissingServiceError(variable: "the metrics port in \(workers[worker].name)'s log") }
        let text = try await TestHTTPClient(port: port).get("/metrics").text
        for row in text.split(separator: "\n") where row.hasPrefix(line + " ") {
            return Double(row.dropFirst(line.count + 1)) ?? 0
        }
        return 0
    }

    func count(_ query: PostgresQuery) async throws -> Int {
        try await pool.query(query).first!.decode(0, as: Int.self)
    }

    func value<T: PostgresDecodable>(_ query: PostgresQuery, as type: T.Type = T.self) async throws -> T? {
        try await pool.query(query).first?.decode(0, as: T?.self) ?? nil
    }

    /// The subscription row of a chain.
    func subscription(_ original: String, environment: String = "Sandbox") async throws -> SubscriptionRow? {
        guard
            let row = try await pool.query(
                """
                SELECT user_id, status, active_product_id, pending_product_id, auto_renew_enabled, expires_at,
                       grace_expires_at, last_transaction_id, frozen_reason, is_family_shared
                  FROM user_subscription WHERE environment = \(environment) AND original_transaction_id = \(original)
                """
            ).first
        else { return nil }
        return SubscriptionRow(
            userID: try row.decode("user_id"), status: try row.decode("status"),
            activeProductID: try row.decode("active_product_id"),
            pendingProductID: try row.decode("pending_product_id", as: String?.self),
            autoRenewEnabled: try row.decode("auto_renew_enabled"), expiresAt: try row.decode("expires_at", as: Date?.self),
            graceExpiresAt: try row.decode("grace_expires_at", as: Date?.self),
            lastTransactionID: try row.decode("last_transaction_id"),
            frozenReason: try row.decode("frozen_reason", as: String?.self),
            isFamilyShared: try row.decode("is_family_shared"))
    }

    /// Whole credits of a user's SUBSCRIPTION pool (0 without an account).
    func balance(_ user: String) async throws -> Int64 {
        (try await value(
            "SELECT balance FROM credit_account WHERE user_id = \(user) AND pool = 'SUBSCRIPTION'", as: Int64.self) ?? 0)
            / 1_000_000
    }

    /// The invariants every scenario ends with: each balance equals the sum of its ledger and is
    /// never negative, each grant key was granted once, every event reached a final state, and
    /// replaying the stored facts rebuilds every subscription row.
    func checkInvariants(sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let unbalanced = try await count(
            """
            SELECT count(*) FROM credit_account a
             WHERE a.balance <> coalesce((SELECT sum(delta) FROM credit_ledger l
                                           WHERE l.user_id = a.user_id AND l.pool = a.pool), 0)
                OR a.balance < 0
            """)
        #expect(unbalanced == 0, "balances differ from their ledgers", sourceLocation: sourceLocation)
        let doubleGrants = try await count(
            "SELECT count(*) FROM (SELECT reference FROM credit_ledger WHERE entry_type = 'GRANT' GROUP BY reference HAVING count(*) > 1) d")
        #expect(doubleGrants == 0, "a grant was booked twice", sourceLocation: sourceLocation)
        let open = try await count(
            """
            SELECT (SELECT count(*) FROM inbound_event WHERE kind = 'notification' AND process_status NOT IN ('SUCCEEDED', 'DEAD'))
                 + (SELECT count(*) FROM inbound_event WHERE kind = 'submission' AND process_status NOT IN ('SUCCEEDED', 'DEAD'))
            """)
        #expect(open == 0, "events still in flight", sourceLocation: sourceLocation)
        let mismatches = try await ChainReplay.mismatches(pool: pool, now: Date())
        #expect(mismatches.isEmpty, "replay differs: \(mismatches)", sourceLocation: sourceLocation)
        let leaks = ingress.leakedSecrets()
        #expect(leaks.isEmpty, "the ingress log leaks \(leaks)", sourceLocation: sourceLocation)
        for worker in workers {
            let output = worker.output
            #expect(
                output.range(of: #"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"#, options: .regularExpression) == nil,
                "\(worker.name) logged a JWS", sourceLocation: sourceLocation)
            #expect(!output.contains("\"level\":\"critical\""), "\(worker.name) failed: \(output.suffix(2000))", sourceLocation: sourceLocation)
        }
    }
}

/// Where an event stands.
struct EventState: Equatable, CustomStringConvertible {
    var status: String
    var errorCode: String?
    var description: String { errorCode.map { "\(status) \($0)" } ?? status }
    static let succeeded = EventState(status: "SUCCEEDED", errorCode: nil)
    static func dead(_ code: String) -> EventState { EventState(status: "DEAD", errorCode: code) }
}

/// A `user_subscription` row as tests read it.
struct SubscriptionRow: Equatable {
    var userID: String
    var status: String
    var activeProductID: String
    var pendingProductID: String?
    var autoRenewEnabled: Bool
    var expiresAt: Date?
    var graceExpiresAt: Date?
    var lastTransactionID: String
    var frozenReason: String?
    var isFamilyShared: Bool
}
