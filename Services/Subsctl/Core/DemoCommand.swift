import AppStore
import Crypto
import DemoSigner
import Foundation
import ServiceRuntime

/// `subsctl demo`: the local demo. A simulated Apple (the demo signer) and a simulated app drive
/// one user through a purchase, a renewal, a plan change and a refund, through HTTP only, and
/// the evidence chain the REST API shows is printed after each step.
///
/// It reports what it sees: a step the worker has not applied within the wait is shown as it
/// stands. It fails only when the ingress is unreachable, refuses a request, or never answers
/// ready / accepted within its bounded waits.
enum DemoCommand: SubsctlCommand {
    static let path = ["demo"]
    static let usage = "demo --ingress URL --signer-dir DIR [--user-id ID] [--wait-seconds N]"
    static let summary = """
        Local demo only: purchase, renewal, plan change and refund against a running ingress and worker, signed by the \
        demo signer (trusted only with APPLE_IAP_ALLOW_TEST_ROOTS=true). Reads USER_TOKEN_HS256_SECRET and \
        APPLE_IAP_BUNDLE_ID (default com.example.subscriptions) like the services.
        """

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        guard let ingress = arguments.option("ingress").flatMap(URL.init(string:)), ingress.scheme == "http" || ingress.scheme == "https"
        else { return usageError("--ingress must be an http(s) URL") }
        guard let signerDir = arguments.option("signer-dir") else { return usageError("--signer-dir is required") }
        let user = arguments.userID() ?? "demo-" + Hex.encode(SecureRandom.bytes(4))
        guard let wait = Int(arguments.option("wait-seconds") ?? "15"), (0...300).contains(wait) else {
            return usageError("--wait-seconds must be an integer in 0...300")
        }
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("no positional arguments expected") }

        let environment = Subsctl.environment
        guard let secret = environment["USER_TOKEN_HS256_SECRET"], secret.utf8.count >= 32 else {
            Subsctl.printError("USER_TOKEN_HS256_SECRET (at least 32 bytes, as the ingress has it) is required to act as a user")
            return ExitStatus.configuration
        }
        let signer: TestAppleSigner
        do { signer = try TestAppleSigner(loadingFrom: URL(fileURLWithPath: signerDir)) } catch {
            Subsctl.printError("no demo signer in \(signerDir) (create it with `subsctl demo-signer init --dir \(signerDir)`): \(error)")
            return ExitStatus.configuration
        }
        let story = DemoStory(
            client: DemoHTTPClient(baseURL: ingress), signer: signer,
            bundleId: environment["APPLE_IAP_BUNDLE_ID"] ?? "com.example.subscriptions", user: user,
            bearer: DevTokenCommand.token(user: user, secret: secret, ttl: 3600), wait: .seconds(wait))
        do {
            try await story.run()
            // Where support would look this user up.
            let port = environment["ADMIN_HTTP_PORT"].flatMap(Int.init) ?? 8082
            let host = environment["ADMIN_HTTP_HOST"].flatMap { $0 == "0.0.0.0" || $0.isEmpty ? nil : $0 } ?? "127.0.0.1"
            let query = user.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? user
            Subsctl.printOutput(
                """

                Look the user up:  subsctl lookup \(user)
                Support console:   http://\(host):\(port)/admin/case?q=\(query)\(environment["ADMIN_TOKENS"] == nil ? "  (with ADMIN_TOKENS set on the ingress)" : "")
                """)
            return ExitStatus.success
        } catch {
            Subsctl.printError(error.description)
            return error.status
        }
    }
}

/// Why the demo stopped.
struct DemoFailure: Error, CustomStringConvertible {
    let description: String
    let status: Int32

    static func refused(_ what: String, _ response: DemoHTTPClient.Response) -> DemoFailure {
        DemoFailure(description: "\(what): HTTP \(response.status) \(response.text)", status: ExitStatus.refused)
    }
}

/// The story itself: one user, one subscription chain.
struct DemoStory {
    static let starter = "com.example.starter.monthly"
    static let pro = "com.example.pro.monthly"
    static let notificationPath = "/api/v1/iap/apple/notifications/sandbox"
    static let month: TimeInterval = 30 * 86_400

    let client: DemoHTTPClient
    let signer: TestAppleSigner
    let bundleId: String
    let user: String
    let bearer: String
    let wait: Duration

    func run() async throws(DemoFailure) {
        try await waitUntilReady()
        say("Demo against \(client.baseURL.absoluteString) as user \(user)")
        say("Apple is simulated by the local demo signer (Sandbox, bundle \(bundleId)); the app by plain HTTP calls.")

        // 1. Purchase: the app's order, StoreKit's transaction uploaded by the app, Apple's notification.
        step("1. Purchase: the user buys \(Self.starter) in the app")
        let created = try await client.send(
            "POST", "/api/v1/subscriptions/orders",
            json: ["productId": Self.starter, "requestId": UUID().uuidString], bearer: bearer)
        guard created.status == 201 || created.status == 200, let orderNo = created.json["orderNo"] as? String,
            let token = (created.json["appAccountToken"] as? String).flatMap(UUID.init(uuidString:))
        else {
            if created.json["code"] as? String == "PRODUCT_UNAVAILABLE" {
                throw DemoFailure(
                    description: "\(Self.starter) is not in the catalogue: apply deploy/local/catalog.json first",
                    status: ExitStatus.refused)
            }
            throw DemoFailure.refused("creating the order", created)
        }
        say(
            "app    POST /api/v1/subscriptions/orders -> \(created.status): order \(orderNo) \(created.string("status")), appAccountToken \(token.uuidString.lowercased())"
        )
        let now = Date()
        let purchase = TestPayloads.transaction(
            bundleId: bundleId, environment: .sandbox, productId: Self.starter, purchaseDate: now,
            expiresDate: now + Self.month, appAccountToken: token)
        let chain = purchase.originalTransactionId!
        say("Apple  StoreKit purchase: transaction \(purchase.transactionId!), expires \(Self.day(purchase.expiresDate))")
        let uploaded = try await client.send(
            "POST", "/api/v1/subscriptions/orders/\(orderNo)/apple-transaction",
            json: ["signedTransaction": try sign(purchase)], bearer: bearer)
        guard uploaded.status == 200 || uploaded.status == 202 else { throw DemoFailure.refused("uploading the transaction", uploaded) }
        say(
            "app    POST .../orders/\(orderNo)/apple-transaction -> \(uploaded.status) "
                + (uploaded.status == 202
                    ? "FULFILLMENT_PENDING (the worker had not finished within the ingress's wait)"
                    : "order \(uploaded.string("orderStatus")), subscription \(uploaded.string("subscriptionStatus")), credits \(uploaded.string("creditsBalance"))")
        )
        try await notify(.subscribed, .initialBuy, purchase, renewal(purchase, autoRenewProduct: Self.starter))
        try await showEvidence(orderNo: orderNo, chain: chain, transaction: purchase) { evidence in
            evidence.order?["status"] as? String == "FULFILLED"
                && evidence.subscription?["status"] as? String == "ACTIVE"
                && evidence.subscription?["activeProductId"] as? String == Self.starter
        }

        // 2. Renewal: Apple bills the next period (starting at the previous expiry) without the app.
        step("2. Renewal: Apple renews the subscription for the next month")
        var renewed = TestPayloads.transaction(
            bundleId: bundleId, environment: .sandbox, productId: Self.starter, originalTransactionId: chain,
            purchaseDate: Date(), expiresDate: purchase.expiresDate! + Self.month, appAccountToken: token)
        renewed.originalPurchaseDate = purchase.purchaseDate
        renewed.transactionReason = .renewal
        say("Apple  renewal transaction \(renewed.transactionId!) of chain \(chain), expires \(Self.day(renewed.expiresDate))")
        try await notify(.didRenew, nil, renewed, renewal(renewed, autoRenewProduct: Self.starter))
        try await showEvidence(orderNo: orderNo, chain: chain, transaction: renewed) { evidence in
            Self.sameSecond(evidence.subscription?["expiresAt"], renewed.expiresDate)
        }

        // 3. Plan change. Starter is the lowest plan, so the downgrade follows an upgrade: a higher
        // level takes effect at once (new transaction), a lower one at the next renewal.
        step("3. Plan change: upgrade to \(Self.pro) now, then downgrade back to \(Self.starter) from the next renewal")
        var upgrade = TestPayloads.transaction(
            bundleId: bundleId, environment: .sandbox, productId: Self.pro, originalTransactionId: chain, purchaseDate: Date(),
            appAccountToken: token)
        upgrade.originalPurchaseDate = purchase.purchaseDate
        say("Apple  upgrade transaction \(upgrade.transactionId!) for \(Self.pro), takes effect now, expires \(Self.day(upgrade.expiresDate))")
        try await notify(.didChangeRenewalPref, .upgrade, upgrade, renewal(upgrade, autoRenewProduct: Self.pro))
        say("Apple  the user picks \(Self.starter) for the next renewal")
        try await notify(.didChangeRenewalPref, .downgrade, upgrade, renewal(upgrade, autoRenewProduct: Self.starter))
        try await showEvidence(orderNo: orderNo, chain: chain, transaction: upgrade) { evidence in
            evidence.subscription?["activeProductId"] as? String == Self.pro
                && evidence.subscription?["pendingProductId"] as? String == Self.starter
        }

        // 4. Refund: Apple re-signs the current transaction with its revocation.
        step("4. Refund: Apple refunds the \(Self.pro) transaction")
        var refunded = upgrade
        refunded.revocationDate = TestPayloads.wholeMilliseconds(Date())
        refunded.revocationReason = .refundedDueToIssue
        refunded.signedDate = refunded.revocationDate
        say("Apple  transaction \(refunded.transactionId!) revoked at \(RFC3339.string(from: refunded.revocationDate!))")
        try await notify(.refund, nil, refunded, renewal(upgrade, autoRenewProduct: Self.starter))
        try await showEvidence(orderNo: orderNo, chain: chain, transaction: refunded) { evidence in
            evidence.subscription?["status"] as? String == "REVOKED"
        }
        say("")
        say("Demo complete for user \(user) (chain \(chain)).")
    }

    // MARK: - Apple

    private func sign(_ payload: some Encodable) throws(DemoFailure) -> String {
        do { return try signer.sign(payload) } catch { throw DemoFailure(description: "signing failed: \(error)", status: ExitStatus.configuration) }
    }

    private func renewal(_ transaction: JWSTransactionDecodedPayload, autoRenewProduct: String) -> JWSRenewalInfoDecodedPayload {
        var info = TestPayloads.renewalInfo(
            environment: .sandbox, productId: transaction.productId!, originalTransactionId: transaction.originalTransactionId!,
            renewalDate: transaction.expiresDate!)
        info.autoRenewProductId = autoRenewProduct
        return info
    }

    /// Posts a notification as Apple does; a 503 (not stored yet) is retried within the wait, as Apple would.
    private func notify(
        _ type: NotificationTypeV2, _ subtype: Subtype?, _ transaction: JWSTransactionDecodedPayload,
        _ renewalInfo: JWSRenewalInfoDecodedPayload
    ) async throws(DemoFailure) {
        let signed: String
        do {
            signed = try signer.signNotification(
                type: type, subtype: subtype, bundleId: bundleId, environment: .sandbox, transaction: transaction,
                renewalInfo: renewalInfo)
        } catch { throw DemoFailure(description: "signing failed: \(error)", status: ExitStatus.configuration) }
        let name = type.rawValue + (subtype.map { "/" + $0.rawValue } ?? "")
        let deadline = ContinuousClock.now + wait
        while true {
            let response = try await client.send("POST", Self.notificationPath, json: ["signedPayload": signed])
            if response.status == 200 {
                say("Apple  POST \(Self.notificationPath) \(name) -> 200 \(response.string("status"))")
                return
            }
            guard response.status == 503 || response.status == 429, ContinuousClock.now < deadline else {
                throw DemoFailure.refused("notification \(name)", response)
            }
            try? await Task.sleep(for: .milliseconds(500))
        }
    }

    // MARK: - Evidence

    /// What the REST API shows for the user at one moment.
    struct Evidence {
        var order: [String: Any]?
        /// This chain's entry of /subscriptions/current; nil when it has none (yet).
        var subscription: [String: Any]?
        var subscriptionsServed = true
        var balance: [String: Any]?
        var grants: [[String: Any]]?
    }

    private func fetchEvidence(orderNo: String, chain: String) async throws(DemoFailure) -> Evidence {
        var evidence = Evidence()
        let order = try await client.send("GET", "/api/v1/subscriptions/orders/\(orderNo)", bearer: bearer)
        guard order.status == 200 else { throw DemoFailure.refused("reading order \(orderNo)", order) }
        evidence.order = order.json
        // 404 below means the ingress does not serve that read (an older build): shown, not fatal.
        let current = try await client.send("GET", "/api/v1/subscriptions/current", bearer: bearer)
        evidence.subscriptionsServed = current.status != 404
        evidence.subscription = (current.json["subscriptions"] as? [[String: Any]])?
            .first { $0["originalTransactionId"] as? String == chain }
        let balance = try await client.send("GET", "/api/v1/credits/balance", bearer: bearer)
        if balance.status == 200 { evidence.balance = balance.json }
        let grants = try await client.send("GET", "/api/v1/credits/grants", bearer: bearer)
        if grants.status == 200 { evidence.grants = grants.json["items"] as? [[String: Any]] }
        return evidence
    }

    /// Polls the REST API until `applied` holds or the wait is over, then prints what it shows.
    private func showEvidence(
        orderNo: String, chain: String, transaction: JWSTransactionDecodedPayload, applied: (Evidence) -> Bool
    ) async throws(DemoFailure) {
        let start = ContinuousClock.now
        var evidence = try await fetchEvidence(orderNo: orderNo, chain: chain)
        // Without the subscription read there is nothing to wait for: the order alone cannot show later steps.
        while evidence.subscriptionsServed, !applied(evidence), ContinuousClock.now - start < wait {
            try? await Task.sleep(for: .milliseconds(250))
            evidence = try await fetchEvidence(orderNo: orderNo, chain: chain)
        }
        let elapsed = ContinuousClock.now - start
        let transactionID = transaction.transactionId!
        say(
            "evidence"
                + (applied(evidence)
                    ? " (applied by the worker, seen after \(Self.seconds(elapsed)))"
                    : evidence.subscriptionsServed
                        ? " (the worker has not applied this step within \(Self.seconds(wait)): as the API shows it now)"
                        : " (this ingress does not serve /api/v1/subscriptions/current: as far as the API shows)"))
        if let order = evidence.order {
            say(
                "  order         \(orderNo) \(order["status"] as? String ?? "?") (\(order["orderType"] as? String ?? "?")), transaction \(order["transactionId"] as? String ?? "none yet")"
            )
        }
        say("  transaction   \(transactionID) of chain \(chain)" + (transaction.revocationDate == nil ? "" : ", revoked"))
        if let subscription = evidence.subscription {
            var line = "  subscription  \(subscription["status"] as? String ?? "?") \(subscription["activeProductId"] as? String ?? "?")"
            line += ", expires \(subscription["expiresAt"] as? String ?? "never")"
            line += ", auto-renew \((subscription["autoRenewEnabled"] as? Bool) == false ? "off" : "on")"
            if let pending = subscription["pendingProductId"] as? String { line += ", next renewal \(pending)" }
            say(line)
        } else {
            say("  subscription  " + (evidence.subscriptionsServed ? "none for this chain yet" : "not served by this ingress"))
        }
        if let balance = evidence.balance {
            let pools = balance["pools"] as? [String: Any] ?? [:]
            var line = "  credits       \(balance["creditsBalance"].map { "\($0)" } ?? "?") available"
            line += " (subscription \(pools["subscription"] ?? "?"), welcome \(pools["welcome"] ?? "?"), permanent \(pools["permanent"] ?? "?"))"
            if let grant = evidence.grants?.first(where: { $0["transactionId"] as? String == transactionID }) {
                line += "; grant for this transaction \(grant["amount"] ?? "?")"
                if let revoked = grant["revokedAmount"] as? String, revoked != "0" { line += ", \(revoked) revoked" }
            }
            say(line)
        } else {
            say("  credits       not served by this ingress")
        }
    }

    // MARK: - Plumbing

    private func waitUntilReady() async throws(DemoFailure) {
        let deadline = ContinuousClock.now + max(wait, .seconds(5))
        var last = "no answer"
        while ContinuousClock.now < deadline {
            do {
                let response = try await client.send("GET", "/readyz")
                if response.status == 200 { return }
                last = "HTTP \(response.status) \(response.text)"
            } catch {
                last = error.description
            }
            try? await Task.sleep(for: .milliseconds(500))
        }
        throw DemoFailure(description: "the ingress at \(client.baseURL.absoluteString) is not ready: \(last)", status: ExitStatus.temporaryFailure)
    }

    private func step(_ title: String) {
        say("")
        say("== \(title) ==")
    }

    private func say(_ line: String) { Subsctl.printOutput(line) }

    static func day(_ date: Date?) -> String { date.map { RFC3339.string(from: $0) } ?? "never" }

    static func seconds(_ duration: Duration) -> String {
        String(format: "%.1f s", duration.inSeconds)
    }

    /// API times are whole seconds; Apple's carry milliseconds.
    static func sameSecond(_ apiValue: Any?, _ date: Date?) -> Bool {
        guard let text = apiValue as? String, let parsed = RFC3339.date(from: text), let date else { return false }
        return abs(parsed.timeIntervalSince(date)) < 1
    }
}
