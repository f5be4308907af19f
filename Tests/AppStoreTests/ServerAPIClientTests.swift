import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import ServiceRuntime
import TestSupport
import Testing

/// A client and a mock App Store Server API on loopback, wired to each other.
struct APIFixture {
    static let bundleId = "com.example.app"
    let signer: TestAppleSigner
    let key: P256PrivateKey
    let mock: MockAppStoreServerAPI

    /// Runs `body` with a default fixture, whose mock is shut down after it (also on throw).
    @discardableResult
    static func with<R>(_ body: (APIFixture) async throws -> R) async throws -> R {
        try await withResource({ try APIFixture() }, cleanUp: { await $0.mock.shutdown() }, body)
    }

    init(environment: AppStoreEnvironment = .sandbox, signer: TestAppleSigner? = nil, key: P256PrivateKey = .generate()) throws {
        let signer = try signer ?? TestAppleSigner()
        self.signer = signer
        self.key = key
        mock = MockAppStoreServerAPI(
            signer: signer,
            credentials: .init(issuerId: "issuer-1", keyId: "KEY123", bundleId: Self.bundleId, publicKey: key.publicKey),
            environment: environment)
        _ = try mock.start()
    }

    func configuration(
        environment: AppStoreEnvironment = .sandbox, production: URL? = nil,
        // Patient: under a full run's load the in-process mock once took over 15 s to answer, and
        // no test of these defaults is about timing (the timeout tests give their own).
        timeouts: AppStoreAPITimeouts = AppStoreAPITimeouts(connect: .seconds(30), read: .seconds(60), total: .seconds(180)),
        maxAttempts: Int = 4
    ) -> AppStoreServerAPIConfiguration {
        AppStoreServerAPIConfiguration(
            issuerId: "issuer-1", keyId: "KEY123", signingKey: key, bundleId: Self.bundleId, environment: environment,
            productionBaseURL: production ?? mock.baseURL, sandboxBaseURL: mock.baseURL, timeouts: timeouts,
            retryPolicy: AppStoreAPIRetryPolicy(maxAttempts: maxAttempts, baseDelay: .milliseconds(2), maxDelay: .milliseconds(20)))
    }

    func client(_ configuration: AppStoreServerAPIConfiguration? = nil) -> AppStoreServerAPIClient {
        AppStoreServerAPIClient(configuration: configuration ?? self.configuration(), logger: Logger(label: "test", level: .error))
    }

    func transaction(
        id: String = String(UInt64.random(in: 2_000_000_000_000_000...2_999_999_999_999_999)), original: String? = nil,
        purchased: Date = Date()
    ) -> JWSTransactionDecodedPayload {
        TestPayloads.transaction(
            bundleId: Self.bundleId, environment: mock.environment, transactionId: id, originalTransactionId: original, purchaseDate: purchased)
    }

    func verifier() throws -> SignedDataVerifier {
        try SignedDataVerifier(configuration: signer.verifierConfiguration(bundleId: Self.bundleId), metrics: MetricsRegistry())
    }
}

@Suite struct ServerAPIClientTests {
    @Test func theTokenCarriesAppleClaimsAndIsReused() async throws {
        try await APIFixture.with { fixture in
            let transaction = fixture.transaction()
            try fixture.mock.addTransaction(transaction)
            let client = fixture.client()
            _ = try await client.getTransactionInfo(transactionId: transaction.transactionId!)
            _ = try await client.getTransactionInfo(transactionId: transaction.transactionId!)
            let requests = fixture.mock.requests
            #expect(requests.count == 2)
            #expect(requests.allSatisfy { $0.authorized }, "\(requests.compactMap(\.authorizationProblem))")
            #expect(requests[0].token == requests[1].token)
            let token = try #require(requests[0].token)
            let parts = token.split(separator: ".")
            let header = try JSONSerialization.jsonObject(with: Data(#require(Base64URL.decode(parts[0])))) as? [String: Any]
            let claims = try JSONSerialization.jsonObject(with: Data(#require(Base64URL.decode(parts[1])))) as? [String: Any]
            #expect(header?["alg"] as? String == "ES256" && header?["kid"] as? String == "KEY123")
            #expect(claims?["iss"] as? String == "issuer-1" && claims?["aud"] as? String == "appstoreconnect-v1")
            #expect(claims?["bid"] as? String == APIFixture.bundleId)
            let iat = try #require(claims?["iat"] as? Int)
            let exp = try #require(claims?["exp"] as? Int)
            #expect(exp > iat && exp - iat <= 3600)
        }
    }

    @Test func everyEndpointAnswersWithVerifiableData() async throws {
        try await APIFixture.with { fixture in
            let verifier = try fixture.verifier()
            let first = fixture.transaction(id: "1000", purchased: Date() - 3 * 86400)
            var renewal = fixture.transaction(id: "1001", original: "1000", purchased: Date() - 86400)
            renewal.revocationDate = TestPayloads.wholeMilliseconds(Date())
            try fixture.mock.addTransaction(first)
            try fixture.mock.addTransaction(
                renewal, renewalInfo: TestPayloads.renewalInfo(environment: .sandbox, originalTransactionId: "1000"), status: .active)
            let client = fixture.client()

            let info = try await client.getTransactionInfo(transactionId: "1000")
            #expect(try await verifier.verifyTransaction(#require(info.signedTransactionInfo)) == first)

            let statuses = try await client.getAllSubscriptionStatuses(transactionId: "1000", status: [.active])
            let last = try #require(statuses.data?.first?.lastTransactions?.first)
            #expect(last.status == .active && last.originalTransactionId == "1000")
            #expect(try await verifier.verifyTransaction(#require(last.signedTransactionInfo)).transactionId == "1001")
            #expect(try await verifier.verifyRenewalInfo(#require(last.signedRenewalInfo)).originalTransactionId == "1000")
            #expect(statuses.environment == .sandbox)

            let refunds = try await client.getRefundHistory(transactionId: "1000")
            #expect(refunds.signedTransactions?.count == 1 && refunds.hasMore == false)

            try await client.sendConsumptionInformation(
                transactionId: "1001",
                ConsumptionRequest(
                    customerConsented: true, consumptionPercentage: 25_000, deliveryStatus: "DELIVERED", refundPreference: "GRANT_PRORATED",
                    sampleContentProvided: false))
            #expect(fixture.mock.consumptionData(for: "1001")?.consumptionPercentage == 25_000)
            #expect(fixture.mock.consumptionData(for: "1001")?.refundPreference == "GRANT_PRORATED")
            let body = String(
                decoding: try AppStoreJSON.encoder().encode(
                    ConsumptionRequest(customerConsented: true, deliveryStatus: "UNDELIVERED_OTHER", sampleContentProvided: true)),
                as: UTF8.self)
            #expect(
                Set((try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any] ?? [:]).keys)
                    == ["customerConsented", "deliveryStatus", "sampleContentProvided"], "Apple's names; no preference is left out")

            let extended = try await client.extendSubscriptionRenewalDate(
                originalTransactionId: "1000", ExtendRenewalDateRequest(extendByDays: 3, extendReasonCode: 1, requestIdentifier: UUID().uuidString))
            #expect(extended.success == true && extended.originalTransactionId == "1000")

            let token = UUID()
            try await client.setAppAccountToken(originalTransactionId: "1000", UpdateAppAccountTokenRequest(appAccountToken: token))
            #expect(fixture.mock.appAccountToken(for: "1000") == token)

            let test = try await client.requestTestNotification()
            let status = try await client.getTestNotificationStatus(testNotificationToken: #require(test.testNotificationToken))
            #expect(try await verifier.verifyNotification(#require(status.signedPayload)).notificationType == .test)
            #expect(status.sendAttempts?.first?.sendAttemptResult == "SUCCESS")
            #expect(fixture.mock.requests.allSatisfy { $0.authorized })
        }
    }

    @Test func transactionHistoryPagesWithRevision() async throws {
        try await APIFixture.with { fixture in
            let start = Date() - 10 * 86400
            for index in 0..<5 {
                try fixture.mock.addTransaction(fixture.transaction(id: "50\(index)", original: "500", purchased: start + Double(index) * 86400))
            }
            let client = fixture.client()
            let verifier = try fixture.verifier()
            var revision: String?
            var ids: [String] = []
            var pages = 0
            repeat {
                let page = try await client.getTransactionHistory(
                    transactionId: "500", revision: revision, request: TransactionHistoryRequest(sort: .ascending))
                pages += 1
                for signed in page.signedTransactions ?? [] { ids.append(try #require(try await verifier.verifyTransaction(signed).transactionId)) }
                revision = page.hasMore == true ? page.revision : nil
            } while revision != nil && pages < 10
            #expect(ids == ["500", "501", "502", "503", "504"])
            #expect(pages == 3)
            #expect(fixture.mock.requests.map { $0.query["revision"] } == [nil, "rev-2", "rev-4"])
            #expect(fixture.mock.requests.allSatisfy { $0.query["sort"] == "ASCENDING" })
        }
    }

    @Test func notificationHistoryPagesWithPaginationToken() async throws {
        try await APIFixture.with { fixture in
            let payloads = try (0..<3).map { _ in
                try fixture.signer.signNotification(type: .didRenew, bundleId: APIFixture.bundleId, environment: .sandbox)
            }
            for payload in payloads { fixture.mock.addNotification(signedPayload: payload) }
            let client = fixture.client()
            let filters = NotificationHistoryRequest(startDate: Date() - 86400, endDate: Date(), onlyFailures: false)
            let first = try await client.getNotificationHistory(request: filters)
            #expect(first.hasMore == true && first.notificationHistory?.count == 2)
            let second = try await client.getNotificationHistory(paginationToken: first.paginationToken, request: filters)
            #expect(second.hasMore == false)
            #expect(((first.notificationHistory ?? []) + (second.notificationHistory ?? [])).map(\.signedPayload) == payloads)
            let error = await #expect(throws: AppStoreAPIError.self) {
                try await client.getNotificationHistory(paginationToken: "bogus", request: filters)
            }
            #expect(error?.apiError == .invalidPaginationToken && error?.statusCode == 400 && error?.attempts == 1)
        }
    }

    @Test func retryableAnswersAreRetriedUntilSuccess() async throws {
        try await APIFixture.with { fixture in
            let transaction = fixture.transaction()
            try fixture.mock.addTransaction(transaction)
            fixture.mock.enqueue(
                .init(status: 503), .init(status: 500, errorCode: 5_000_001), .init(status: 429, errorCode: 4_290_000))
            func answers(_ status: String) -> Int {
                MetricsRegistry.shared.counter(
                    "appstore_server_api_responses_total", help: "App Store Server API answers by status (error: none came)",
                    labels: ["status": status]
                ).value
            }
            let before = ["2xx", "429", "5xx"].map(answers)
            let response = try await fixture.client().getTransactionInfo(transactionId: transaction.transactionId!)
            #expect(response.signedTransactionInfo != nil)
            #expect(fixture.mock.requests.count == 4)
            // Each answer counted by status (at least: tests running beside this one count theirs too).
            let counted = zip(["2xx", "429", "5xx"].map(answers), before).map { $0 - $1 }
            #expect(counted[0] >= 1 && counted[1] >= 1 && counted[2] >= 2, "\(counted)")
        }
    }

    @Test(arguments: [4_040_002, 4_040_004, 4_040_006] as [Int64])
    func appleRetryableNotFoundCodesAreRetried(code: Int64) async throws {
        try await APIFixture.with { fixture in
            let transaction = fixture.transaction()
            try fixture.mock.addTransaction(transaction)
            fixture.mock.enqueue(.init(status: 404, errorCode: code))
            _ = try await fixture.client().getAllSubscriptionStatuses(transactionId: transaction.transactionId!)
            #expect(fixture.mock.requests.count == 2)
        }
    }

    @Test(arguments: [(400, 4_000_006), (404, 4_040_010), (500, 5_000_000), (403, 4_030_004), (400, 4_009_999)] as [(Int, Int64)])
    func finalCodesFailAtOnceKeepingTheRawCode(status: Int, code: Int64) async throws {
        try await APIFixture.with { fixture in
            fixture.mock.enqueue(.init(status: status, errorCode: code))
            let error = await #expect(throws: AppStoreAPIError.self) {
                try await fixture.client().getTransactionInfo(transactionId: "123")
            }
            #expect(error?.kind == .api && error?.statusCode == status)
            #expect(error?.rawAPIError == code && error?.apiError?.rawValue == code)
            #expect(error?.isRetryable == false)
            #expect(fixture.mock.requests.count == 1)
        }
    }

    @Test func aMissingTransactionIsParsed() async throws {
        try await APIFixture.with { fixture in
            let error = await #expect(throws: AppStoreAPIError.self) {
                try await fixture.client().getTransactionInfo(transactionId: "404404")
            }
            #expect(error?.apiError == .transactionIdNotFound && error?.message == "Transaction id not found.")
        }
    }

    @Test func retriesStopAtMaxAttempts() async throws {
        try await APIFixture.with { fixture in
            fixture.mock.enqueue(.init(status: 502), .init(status: 502), .init(status: 502), .init(status: 502), .init(status: 502))
            let error = await #expect(throws: AppStoreAPIError.self) {
                try await fixture.client(fixture.configuration(maxAttempts: 3)).getTransactionInfo(transactionId: "1")
            }
            #expect(error?.statusCode == 502 && error?.attempts == 3 && error?.isRetryable == true)
            #expect(fixture.mock.requests.count == 3)
        }
    }

    @Test func retryAfterIsHonoured() async throws {
        try await APIFixture.with { fixture in
            let transaction = fixture.transaction()
            try fixture.mock.addTransaction(transaction)
            fixture.mock.enqueue(.init(status: 429, errorCode: 4_290_000, retryAfter: "1"))
            let started = ContinuousClock.now
            _ = try await fixture.client().getTransactionInfo(transactionId: transaction.transactionId!)
            // A lower bound only: the back-off alone is milliseconds, so only Retry-After explains a second.
            #expect(ContinuousClock.now - started >= .seconds(1))
            #expect(fixture.mock.requests.count == 2)
        }
    }

    @Test func aRetryAfterBeyondTheTotalTimeoutFailsAtOnce() async throws {
        try await APIFixture.with { fixture in
            fixture.mock.enqueue(.init(status: 429, errorCode: 4_290_000, retryAfter: "600"))
            let error = await #expect(throws: AppStoreAPIError.self) {
                try await fixture.client().getTransactionInfo(transactionId: "1")
            }
            #expect(error?.apiError == .rateLimitExceeded && error?.attempts == 1)
            #expect(fixture.mock.requests.count == 1)
        }
    }

    @Test func a401ReSignsTheTokenOnce() async throws {
        try await APIFixture.with { fixture in
            let transaction = fixture.transaction()
            try fixture.mock.addTransaction(transaction)
            let client = fixture.client()
            _ = try await client.getTransactionInfo(transactionId: transaction.transactionId!)
            fixture.mock.enqueue(.init(status: 401))
            _ = try await client.getTransactionInfo(transactionId: transaction.transactionId!)
            let tokens = fixture.mock.requests.map(\.token)
            #expect(tokens.count == 3)
            #expect(tokens[0] == tokens[1] && tokens[2] != tokens[1])

            fixture.mock.enqueue(.init(status: 401), .init(status: 401))
            let error = await #expect(throws: AppStoreAPIError.self) {
                try await client.getTransactionInfo(transactionId: transaction.transactionId!)
            }
            #expect(error?.statusCode == 401 && error?.attempts == 2)
        }
    }

    @Test func aSlowAnswerTimesOutAndIsRetried() async throws {
        try await APIFixture.with { fixture in
            let transaction = fixture.transaction()
            try fixture.mock.addTransaction(transaction)
            // The read timeout must be long enough for the mock's immediate answer to the retry on a
            // loaded machine (300 ms was not, in a full run), and the slow answer far longer still.
            let timeouts = AppStoreAPITimeouts(connect: .seconds(2), read: .seconds(2), total: .seconds(60))
            fixture.mock.enqueue(.init(status: 200, delay: .seconds(10)))
            let once = fixture.client(fixture.configuration(timeouts: timeouts, maxAttempts: 1))
            let error = await #expect(throws: AppStoreAPIError.self) {
                try await once.getTransactionInfo(transactionId: transaction.transactionId!)
            }
            #expect(error?.kind == .timeout && error?.isRetryable == true)

            fixture.mock.enqueue(.init(status: 200, delay: .seconds(10)))
            let retrying = fixture.client(fixture.configuration(timeouts: timeouts, maxAttempts: 2))
            _ = try await retrying.getTransactionInfo(transactionId: transaction.transactionId!)
        }
    }

    @Test func theTotalTimeoutBoundsRetries() async throws {
        try await APIFixture.with { fixture in
            for _ in 0..<4 { fixture.mock.enqueue(.init(status: 200, delay: .seconds(2))) }
            let timeouts = AppStoreAPITimeouts(connect: .milliseconds(200), read: .milliseconds(400), total: .milliseconds(900))
            let error = await #expect(throws: AppStoreAPIError.self) {
                try await fixture.client(fixture.configuration(timeouts: timeouts, maxAttempts: 10)).getTransactionInfo(transactionId: "1")
            }
            #expect(error?.kind == .timeout, "\(String(describing: error))")
            #expect((error?.attempts ?? 99) < 10)
        }
    }

    @Test func anUnreachableHostIsATransportErrorAfterRetries() async throws {
        let fixture = try APIFixture()
        let url = fixture.mock.baseURL
        await fixture.mock.shutdown()
        var configuration = fixture.configuration(maxAttempts: 2)
        configuration.sandboxBaseURL = url
        let error = await #expect(throws: AppStoreAPIError.self) {
            try await fixture.client(configuration).getTransactionInfo(transactionId: "1")
        }
        #expect(error?.kind == .transport && error?.attempts == 2)
    }

    @Test func productionFallsBackToSandboxOnlyWhenAsked() async throws {
        let production = try APIFixture(environment: .production)
        let sandbox = try APIFixture(environment: .sandbox, signer: production.signer, key: production.key)
        defer {
            Task {
                await production.mock.shutdown()
                await sandbox.mock.shutdown()
            }
        }
        let transaction = sandbox.transaction()
        try sandbox.mock.addTransaction(transaction)
        let sandboxKeyed = AppStoreServerAPIConfiguration(
            issuerId: "issuer-1", keyId: "KEY123", signingKey: sandbox.key, bundleId: APIFixture.bundleId, environment: .production,
            productionBaseURL: production.mock.baseURL, sandboxBaseURL: sandbox.mock.baseURL,
            retryPolicy: AppStoreAPIRetryPolicy(baseDelay: .milliseconds(1)))
        let client = sandbox.client(sandboxKeyed)
        let error = await #expect(throws: AppStoreAPIError.self) {
            try await client.getTransactionInfo(transactionId: transaction.transactionId!)
        }
        #expect(error?.apiError == .transactionIdNotFound)
        #expect(sandbox.mock.requests.isEmpty)
        let response = try await client.getTransactionInfo(transactionId: transaction.transactionId!, fallbackToSandbox: true)
        #expect(response.signedTransactionInfo != nil)
        #expect(sandbox.mock.requests.count == 1 && production.mock.requests.count == 2)
    }

    @Test func identifiersThatAreNotPathSegmentsAreRefusedUnsent() async throws {
        try await APIFixture.with { fixture throws in
            for id in ["../x", "a/b", "", "1?x=2", "%2e%2e"] {
                let error = await #expect(throws: AppStoreAPIError.self) { try await fixture.client().getTransactionInfo(transactionId: id) }
                #expect(error?.kind == .invalidRequest)
            }
            #expect(fixture.mock.requests.isEmpty)
        }
    }

    @Test func configurationComesFromTheEnvironment() throws {
        let key = P256PrivateKey.generate()
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("AuthKey_\(UUID().uuidString).p8").path
        try Data(key.pemPKCS8().utf8).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let environment = [
            "APPLE_IAP_ISSUER_ID": "issuer", "APPLE_IAP_KEY_ID": "KID", "APPLE_IAP_PRIVATE_KEY_PATH": path,
            "APPLE_IAP_BUNDLE_ID": "com.example.app", "APPLE_IAP_ENV": "Production",
            "APPLE_IAP_API_BASE_URL_SANDBOX": "http://127.0.0.1:9999",
        ]
        let configuration = try AppStoreServerAPIConfiguration(environment: environment)
        #expect(configuration.issuerId == "issuer" && configuration.keyId == "KID" && configuration.environment == .production)
        #expect(configuration.productionBaseURL.absoluteString == "https://api.storekit.apple.com")
        #expect(configuration.sandboxBaseURL.absoluteString == "http://127.0.0.1:9999")
        #expect(configuration.signingKey.publicKey.derRepresentation == key.publicKey.derRepresentation)

        let missing = #expect(throws: ConfigurationError.self) { try AppStoreServerAPIConfiguration(environment: [:]) }
        #expect(
            Set(missing?.problems.map(\.name) ?? []) == [
                "APPLE_IAP_ISSUER_ID", "APPLE_IAP_KEY_ID", "APPLE_IAP_PRIVATE_KEY_PATH", "APPLE_IAP_BUNDLE_ID", "APPLE_IAP_ENV",
            ])
        var bad = environment
        bad["APPLE_IAP_ENV"] = "Xcode"
        bad["APPLE_IAP_PRIVATE_KEY_PATH"] = "/nonexistent.p8"
        bad["APPLE_IAP_API_BASE_URL_PRODUCTION"] = "ftp://example"
        let refused = #expect(throws: ConfigurationError.self) { try AppStoreServerAPIConfiguration(environment: bad) }
        #expect(
            Set(refused?.problems.map(\.name) ?? []) == [
                "APPLE_IAP_ENV", "APPLE_IAP_PRIVATE_KEY_PATH", "APPLE_IAP_API_BASE_URL_PRODUCTION",
            ])
    }
}
