import AppStore
import Crypto
import DemoSigner
import Foundation
import HTTPServer
import ServiceRuntime
import Synchronization

/// A stand-in for the App Store Server API on 127.0.0.1 (a free port), for tests and the demo.
///
/// It checks every bearer token as Apple does (ES256 signature with the API key, `kid`, `iss`,
/// `aud`, `bid`, `iat`/`exp` at most 60 minutes apart and not expired), serves the scripted
/// transactions, notifications and refunds signed by a `TestAppleSigner`, pages like Apple
/// (`revision`, `paginationToken`), answers scripted faults (429/5xx/401, Apple error codes,
/// Retry-After, delays) before anything else, and records every request.
///
/// Sendable: all mutable state sits behind one Mutex.
public final class MockAppStoreServerAPI: Sendable {
    /// A scripted failure answered instead of the next matching request.
    public struct Fault: Sendable {
        public var status: Int
        public var errorCode: Int64?
        public var retryAfter: String?
        /// Held this long before answering (for timeout tests).
        public var delay: Duration?
        /// Only requests whose path starts with this (nil: any).
        public var pathPrefix: String?

        public init(status: Int, errorCode: Int64? = nil, retryAfter: String? = nil, delay: Duration? = nil, pathPrefix: String? = nil) {
            self.status = status
            self.errorCode = errorCode
            self.retryAfter = retryAfter
            self.delay = delay
            self.pathPrefix = pathPrefix
        }
    }

    /// One request as the mock saw it.
    public struct RecordedRequest: Sendable {
        public var method: String
        public var path: String
        public var query: [String: String]
        public var body: [UInt8]
        /// The bearer token sent, if any.
        public var token: String?
        /// Whether the token passed every check (false also when a fault answered first).
        public var authorized: Bool
        /// Why the token was refused, when it was.
        public var authorizationProblem: String?
    }

    /// What the mock accepts in tokens.
    public struct Credentials: Sendable {
        public var issuerId: String
        public var keyId: String
        public var bundleId: String
        public var publicKey: P256PublicKey

        public init(issuerId: String, keyId: String, bundleId: String, publicKey: P256PublicKey) {
            self.issuerId = issuerId
            self.keyId = keyId
            self.bundleId = bundleId
            self.publicKey = publicKey
        }
    }

    private struct StoredTransaction {
        var payload: JWSTransactionDecodedPayload
        var signed: String
        var signedRenewalInfo: String?
        var status: Status
    }

    private struct State {
        var transactions: [StoredTransaction] = []
        var notifications: [NotificationHistoryResponseItem] = []
        var testNotifications: [String: CheckTestNotificationResponse] = [:]
        var faults: [Fault] = []
        var requests: [RecordedRequest] = []
        var consumption: [String: ConsumptionRequest] = [:]
        var appAccountTokens: [String: UUID] = [:]
        var massExtensions: [String: MassExtension] = [:]
        var massExtensionRequests: [MassExtendRenewalDateRequest] = []
        var finished: [String] = []
    }

    /// A mass extension as Apple works through it: complete after `pollsLeft` status reads.
    private struct MassExtension {
        var request: MassExtendRenewalDateRequest
        var pollsLeft: Int
        var succeeded: Int64
        var completeDate: Date?
    }

    public let signer: TestAppleSigner
    public let credentials: Credentials
    public let environment: AppStoreEnvironment
    /// Items per page of the paged endpoints (small, so tests page).
    public let pageSize: Int
    /// How many Get Status reads of a mass extension answer `complete: false` before it completes.
    public let massExtensionPolls: Int
    private let state = Mutex(State())
    private let server: Mutex<HTTPServer?> = Mutex(nil)

    public init(
        signer: TestAppleSigner, credentials: Credentials, environment: AppStoreEnvironment = .sandbox, pageSize: Int = 2,
        massExtensionPolls: Int = 2
    ) {
        self.massExtensionPolls = max(0, massExtensionPolls)
        self.signer = signer
        self.credentials = credentials
        self.environment = environment
        self.pageSize = max(1, pageSize)
    }

    /// Starts listening and returns the base URL to configure the client with.
    public func start() throws -> URL {
        var router = Router()
        router.get("/inApps/v1/subscriptions/{id}") { [self] in await serve($0) { try self.statuses($0) } }
        router.get("/inApps/v1/transactions/{id}") { [self] in await serve($0) { try self.transactionInfo($0) } }
        router.get("/inApps/v2/history/{id}") { [self] in await serve($0) { try self.history($0) } }
        router.post("/inApps/v1/notifications/history") { [self] in await serve($0) { try self.notificationHistory($0) } }
        router.post("/inApps/v1/notifications/test") { [self] in await serve($0) { try self.requestTest($0) } }
        router.get("/inApps/v1/notifications/test/{token}") { [self] in await serve($0) { try self.testStatus($0) } }
        router.put("/inApps/v2/transactions/consumption/{id}") { [self] in await serve($0) { try self.consumption($0) } }
        router.put("/inApps/v1/subscriptions/extend/{id}") { [self] in await serve($0) { try self.extend($0) } }
        router.post("/inApps/v1/subscriptions/extend/mass") { [self] in await serve($0) { try self.massExtend($0) } }
        router.get("/inApps/v1/subscriptions/extend/mass/{productId}/{requestIdentifier}") { [self] in
            await serve($0) { try self.massExtensionStatus($0) }
        }
        router.get("/inApps/v1/transactions/appTransactions/{id}") { [self] in await serve($0) { try self.appTransactionInfo($0) } }
        router.post("/inApps/v1/transactions/{id}/finish") { [self] in await serve($0) { try self.finish($0) } }
        router.get("/inApps/v2/refund/lookup/{id}") { [self] in await serve($0) { try self.refunds($0) } }
        router.put("/inApps/v1/transactions/{id}/appAccountToken") { [self] in await serve($0) { try self.appAccountToken($0) } }
        let server = HTTPServer(
            configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 2, shutdownGracePeriod: .milliseconds(200)),
            router: router, logger: Logger(label: "mock.appstore", level: .warning))
        try server.start()
        self.server.withLock { $0 = server }
        return baseURL
    }

    public var baseURL: URL { URL(string: "http://127.0.0.1:\(server.withLock { $0?.port ?? 0 })")! }

    public func shutdown() async {
        let server = self.server.withLock { $0 }
        await server?.shutdown()
    }

    // MARK: Scripting

    /// Serves `transaction` (signed now) with optional renewal info, under `status`.
    public func addTransaction(
        _ transaction: JWSTransactionDecodedPayload, renewalInfo: JWSRenewalInfoDecodedPayload? = nil, status: Status = .active
    ) throws {
        let stored = StoredTransaction(
            payload: transaction, signed: try signer.sign(transaction), signedRenewalInfo: try renewalInfo.map { try signer.sign($0) },
            status: status)
        state.withLock { $0.transactions.append(stored) }
    }

    /// A notification for Get Notification History.
    public func addNotification(
        signedPayload: String, attempts: [SendAttemptItem] = [SendAttemptItem(attemptDate: Date(), sendAttemptResult: "SUCCESS")]
    ) {
        state.withLock { $0.notifications.append(NotificationHistoryResponseItem(signedPayload: signedPayload, sendAttempts: attempts)) }
    }

    /// Answers the next matching requests with these faults, in order.
    public func enqueue(_ faults: Fault...) { state.withLock { $0.faults += faults } }

    public var requests: [RecordedRequest] { state.withLock { $0.requests } }
    public func consumptionData(for transactionId: String) -> ConsumptionRequest? { state.withLock { $0.consumption[transactionId] } }
    /// The TEST notifications Request a Test Notification made, signed (a test delivers them).
    public var testNotificationPayloads: [String] { state.withLock { $0.testNotifications.values.compactMap(\.signedPayload) } }
    public func appAccountToken(for originalTransactionId: String) -> UUID? { state.withLock { $0.appAccountTokens[originalTransactionId] } }
    /// Every mass extension request Apple accepted, in order (a repeated identifier appears twice).
    public var massExtensionRequests: [MassExtendRenewalDateRequest] { state.withLock { $0.massExtensionRequests } }
    /// The transactions Finish Transaction marked finished, in order.
    public var finishedTransactions: [String] { state.withLock { $0.finished } }

    // MARK: Request handling

    private struct Failure: Error {
        let status: Int
        let errorCode: Int64
        let message: String
    }

    private struct AppleErrorBody: Encodable {
        let errorCode: Int64
        let errorMessage: String
    }

    private func serve(_ request: HTTPRequest, _ handler: (HTTPRequest) throws -> HTTPResponse) async -> HTTPResponse {
        let token = request.header("authorization").flatMap { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil }
        let problem = token.map(tokenProblem) ?? "no bearer token"
        let fault = state.withLock { state -> Fault? in
            state.requests.append(
                RecordedRequest(
                    method: request.method, path: request.path, query: request.head.query, body: request.body, token: token,
                    authorized: problem == nil, authorizationProblem: problem))
            guard let index = state.faults.firstIndex(where: { $0.pathPrefix.map(request.path.hasPrefix) ?? true }) else { return nil }
            return state.faults.remove(at: index)
        }
        if let fault {
            if let delay = fault.delay { try? await Task.sleep(for: delay) }
            var response =
                fault.errorCode.map { Self.json(AppleErrorBody(errorCode: $0, errorMessage: "scripted fault"), status: fault.status) }
                ?? HTTPResponse(status: fault.status)
            if let retryAfter = fault.retryAfter { response.headers.append(("Retry-After", retryAfter)) }
            return response
        }
        guard problem == nil else { return HTTPResponse(status: 401) }
        do { return try handler(request) } catch let failure as Failure {
            return Self.json(AppleErrorBody(errorCode: failure.errorCode, errorMessage: failure.message), status: failure.status)
        } catch {
            return Self.json(AppleErrorBody(errorCode: 5_000_000, errorMessage: "\(error)"), status: 500)
        }
    }

    private struct TokenHeader: Decodable {
        let alg: String?
        let kid: String?
        let typ: String?
    }

    private struct TokenClaims: Decodable {
        let iss: String?
        let iat: Int64?
        let exp: Int64?
        let aud: String?
        let bid: String?
    }

    /// Why Apple would refuse this token, or nil.
    private func tokenProblem(_ token: String) -> String? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Base64URL.decode(parts[0]), let claimBytes = Base64URL.decode(parts[1]),
            let signature = Base64URL.decode(parts[2])
        else { return "not a compact JWS" }
        guard let header = try? JSONDecoder().decode(TokenHeader.self, from: Data(headerBytes)),
            let claims = try? JSONDecoder().decode(TokenClaims.self, from: Data(claimBytes))
        else { return "header or claims are not JSON" }
        guard header.alg == "ES256" else { return "alg is not ES256" }
        guard header.kid == credentials.keyId else { return "kid is not the key id" }
        guard header.typ == nil || header.typ == "JWT" else { return "typ is not JWT" }
        guard credentials.publicKey.isValidSignature(signature, for: Array(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count)))
        else { return "signature does not verify" }
        guard claims.iss == credentials.issuerId else { return "iss is not the issuer id" }
        guard claims.aud == "appstoreconnect-v1" else { return "aud is not appstoreconnect-v1" }
        guard claims.bid == credentials.bundleId else { return "bid is not the bundle id" }
        guard let iat = claims.iat, let exp = claims.exp else { return "iat or exp missing" }
        let now = Int64(Date().timeIntervalSince1970)
        guard iat <= now + 60 else { return "iat is in the future" }
        guard exp > now else { return "token expired" }
        guard exp > iat, exp - iat <= 3600 else { return "exp is more than 60 minutes after iat" }
        return nil
    }

    private static func json(_ value: some Encodable, status: Int = 200) -> HTTPResponse {
        let body = (try? AppStoreJSON.encoder().encode(value)) ?? Data()
        return HTTPResponse(status: status, headers: [("Content-Type", "application/json")], body: Array(body))
    }

    private static let notFound = Failure(status: 404, errorCode: 4_040_010, message: "Transaction id not found.")

    private func parameter(_ request: HTTPRequest, _ name: String) -> String { request.pathParameter(name) ?? "" }

    /// The stored transactions of the purchase `id` names (by transaction or original id).
    private func family(of id: String, in transactions: [StoredTransaction]) -> [StoredTransaction] {
        guard let match = transactions.first(where: { $0.payload.transactionId == id || $0.payload.originalTransactionId == id })
        else { return [] }
        return transactions.filter { $0.payload.originalTransactionId == match.payload.originalTransactionId }
    }

    private func statuses(_ request: HTTPRequest) throws -> HTTPResponse {
        let id = parameter(request, "id")
        let wanted = request.query("status").flatMap { Int32($0) }
        let transactions = state.withLock { $0.transactions }
        let purchase = family(of: id, in: transactions)
        guard !purchase.isEmpty else { throw Self.notFound }
        let latest = purchase.max { ($0.payload.purchaseDate ?? .distantPast) < ($1.payload.purchaseDate ?? .distantPast) }!
        var items: [LastTransactionsItem] = []
        if wanted == nil || wanted == latest.status.rawValue {
            items.append(
                LastTransactionsItem(
                    status: latest.status, originalTransactionId: latest.payload.originalTransactionId,
                    signedTransactionInfo: latest.signed, signedRenewalInfo: latest.signedRenewalInfo))
        }
        return Self.json(
            StatusResponse(
                environment: environment, bundleId: credentials.bundleId, appAppleId: nil,
                data: [
                    SubscriptionGroupIdentifierItem(subscriptionGroupIdentifier: latest.payload.subscriptionGroupIdentifier, lastTransactions: items)
                ]))
    }

    private func transactionInfo(_ request: HTTPRequest) throws -> HTTPResponse {
        let id = parameter(request, "id")
        guard let stored = state.withLock({ $0.transactions.first { $0.payload.transactionId == id } }) else { throw Self.notFound }
        return Self.json(TransactionInfoResponse(signedTransactionInfo: stored.signed))
    }

    /// The page starting at the offset a paging token names ("<prefix><offset>").
    private func page<Item>(_ items: [Item], token: String?, prefix: String, invalid: Failure) throws -> (items: [Item], next: String, hasMore: Bool)
    {
        var offset = 0
        if let token {
            guard token.hasPrefix(prefix), let parsed = Int(token.dropFirst(prefix.count)), (0...items.count).contains(parsed) else { throw invalid }
            offset = parsed
        }
        let end = min(items.count, offset + pageSize)
        return (Array(items[offset..<end]), prefix + String(end), end < items.count)
    }

    private func history(_ request: HTTPRequest) throws -> HTTPResponse {
        let transactions = family(of: parameter(request, "id"), in: state.withLock { $0.transactions })
        guard !transactions.isEmpty else { throw Self.notFound }
        var ordered = transactions.sorted { ($0.payload.purchaseDate ?? .distantPast) < ($1.payload.purchaseDate ?? .distantPast) }
        if request.query("sort") == "DESCENDING" { ordered.reverse() }
        if let productId = request.query("productId") { ordered = ordered.filter { $0.payload.productId == productId } }
        let page = try page(
            ordered.map(\.signed), token: request.query("revision"), prefix: "rev-",
            invalid: Failure(status: 400, errorCode: 4_000_005, message: "Invalid request revision."))
        return Self.json(
            HistoryResponse(
                revision: page.next, hasMore: page.hasMore, bundleId: credentials.bundleId, appAppleId: nil, environment: environment,
                signedTransactions: page.items))
    }

    private func notificationHistory(_ request: HTTPRequest) throws -> HTTPResponse {
        guard let filters = try? AppStoreJSON.decoder().decode(NotificationHistoryRequest.self, from: Data(request.body)) else {
            throw Failure(status: 400, errorCode: 4_000_000, message: "Bad request.")
        }
        guard filters.startDate < filters.endDate else {
            throw Failure(status: 400, errorCode: 4_000_013, message: "Start date after end date.")
        }
        // onlyFailures: the notifications that never reached the server (no successful attempt).
        let notifications = state.withLock { $0.notifications }.filter { item in
            filters.onlyFailures != true || !(item.sendAttempts ?? []).contains { $0.sendAttemptResult == "SUCCESS" }
        }
        let page = try page(
            notifications, token: request.query("paginationToken"), prefix: "page-",
            invalid: Failure(status: 400, errorCode: 4_000_014, message: "Invalid pagination token."))
        return Self.json(
            NotificationHistoryResponse(
                paginationToken: page.next, hasMore: page.hasMore, notificationHistory: page.items))
    }

    private func requestTest(_ request: HTTPRequest) throws -> HTTPResponse {
        let token = UUID().uuidString.lowercased() + "_" + String(Int64(Date().timeIntervalSince1970 * 1000))
        var payload = ResponseBodyV2DecodedPayload()
        payload.notificationType = .test
        payload.notificationUUID = UUID().uuidString.lowercased()
        payload.version = "2.0"
        payload.signedDate = TestPayloads.wholeMilliseconds(Date())
        var data = NotificationData()
        data.bundleId = credentials.bundleId
        data.environment = environment
        payload.data = data
        let status = CheckTestNotificationResponse(
            signedPayload: try signer.sign(payload),
            sendAttempts: [SendAttemptItem(attemptDate: TestPayloads.wholeMilliseconds(Date()), sendAttemptResult: "SUCCESS")])
        state.withLock { $0.testNotifications[token] = status }
        return Self.json(SendTestNotificationResponse(testNotificationToken: token))
    }

    private func testStatus(_ request: HTTPRequest) throws -> HTTPResponse {
        guard let status = state.withLock({ $0.testNotifications[parameter(request, "token")] }) else {
            throw Failure(status: 404, errorCode: 4_040_008, message: "Test notification not found.")
        }
        return Self.json(status)
    }

    private func consumption(_ request: HTTPRequest) throws -> HTTPResponse {
        let id = parameter(request, "id")
        guard let body = try? AppStoreJSON.decoder().decode(ConsumptionRequest.self, from: Data(request.body)) else {
            throw Failure(status: 400, errorCode: 4_000_000, message: "Bad request.")
        }
        // As Apple: consent must be true, and the percentage is milliunits of 100 %.
        guard body.customerConsented else {
            throw Failure(status: 400, errorCode: 4_000_183, message: "Invalid request. The customer consented field is invalid.")
        }
        if let percentage = body.consumptionPercentage, !(0...100_000).contains(percentage) {
            throw Failure(status: 400, errorCode: 4_000_000, message: "Bad request.")
        }
        guard
            state.withLock({ state in
                guard state.transactions.contains(where: { $0.payload.transactionId == id }) else { return false }
                state.consumption[id] = body
                return true
            })
        else { throw Self.notFound }
        return HTTPResponse(status: 202)
    }

    private func extend(_ request: HTTPRequest) throws -> HTTPResponse {
        let id = parameter(request, "id")
        guard let body = try? AppStoreJSON.decoder().decode(ExtendRenewalDateRequest.self, from: Data(request.body)),
            let days = body.extendByDays, body.requestIdentifier != nil
        else { throw Failure(status: 400, errorCode: 4_000_000, message: "Bad request.") }
        guard (1...90).contains(days) else { throw Failure(status: 400, errorCode: 4_000_009, message: "Invalid extend by days value.") }
        let purchase = family(of: id, in: state.withLock { $0.transactions })
        guard let latest = purchase.last else {
            throw Failure(status: 404, errorCode: 4_040_005, message: "Original transaction id not found.")
        }
        return Self.json(
            ExtendRenewalDateResponse(
                originalTransactionId: latest.payload.originalTransactionId, webOrderLineItemId: latest.payload.webOrderLineItemId,
                success: true, effectiveDate: (latest.payload.expiresDate ?? Date()) + TimeInterval(days) * 86400))
    }

    /// Apple's checks of a MassExtendRenewalDateRequest; the subscribers it extends are the active
    /// chains of the product (in the storefronts named, when some are).
    private func massExtend(_ request: HTTPRequest) throws -> HTTPResponse {
        guard let body = try? AppStoreJSON.decoder().decode(MassExtendRenewalDateRequest.self, from: Data(request.body)) else {
            throw Failure(status: 400, errorCode: 4_000_000, message: "Bad request.")
        }
        guard (1...90).contains(body.extendByDays) else {
            throw Failure(status: 400, errorCode: 4_000_009, message: "Invalid extend by days value.")
        }
        guard (0...3).contains(body.extendReasonCode) else {
            throw Failure(status: 400, errorCode: 4_000_010, message: "Invalid extend reason code.")
        }
        guard UUID(uuidString: body.requestIdentifier) != nil else {
            throw Failure(status: 400, errorCode: 4_000_011, message: "Invalid request identifier.")
        }
        guard !body.productId.isEmpty else { throw Failure(status: 400, errorCode: 4_000_023, message: "Invalid product id.") }
        state.withLock { state in
            let storefronts = body.storefrontCountryCodes.map(Set.init)
            let chains = Set(
                state.transactions.filter { stored in
                    stored.status == .active && stored.payload.productId == body.productId
                        && (storefronts.map { stored.payload.storefront.map($0.contains) ?? false } ?? true)
                }.compactMap(\.payload.originalTransactionId))
            state.massExtensionRequests.append(body)
            state.massExtensions[body.requestIdentifier] = MassExtension(
                request: body, pollsLeft: massExtensionPolls, succeeded: Int64(chains.count))
        }
        return Self.json(MassExtendRenewalDateResponse(requestIdentifier: body.requestIdentifier))
    }

    private func massExtensionStatus(_ request: HTTPRequest) throws -> HTTPResponse {
        let productId = parameter(request, "productId")
        let identifier = parameter(request, "requestIdentifier")
        let status = state.withLock { state -> MassExtendRenewalDateStatusResponse? in
            guard var job = state.massExtensions[identifier], job.request.productId == productId else { return nil }
            if job.pollsLeft > 0 {
                job.pollsLeft -= 1
            } else if job.completeDate == nil {
                job.completeDate = TestPayloads.wholeMilliseconds(Date())
            }
            state.massExtensions[identifier] = job
            guard let completed = job.completeDate else { return MassExtendRenewalDateStatusResponse(requestIdentifier: identifier, complete: false) }
            return MassExtendRenewalDateStatusResponse(
                requestIdentifier: identifier, complete: true, completeDate: completed, succeededCount: job.succeeded, failedCount: 0)
        }
        guard let status else { throw Failure(status: 404, errorCode: 4_040_009, message: "Status request not found.") }
        return Self.json(status)
    }

    /// The app transaction of the customer whose transaction `id` names, built from that
    /// transaction's `appTransactionId` (Apple: 4040019 when the customer has none).
    private func appTransactionInfo(_ request: HTTPRequest) throws -> HTTPResponse {
        let id = parameter(request, "id")
        let transactions = state.withLock { $0.transactions }
        guard let stored = transactions.first(where: { $0.payload.transactionId == id || $0.payload.originalTransactionId == id })
        else { throw Self.notFound }
        guard let appTransactionId = stored.payload.appTransactionId else {
            throw Failure(status: 404, errorCode: 4_040_019, message: "App transaction does not exist.")
        }
        var app = AppTransaction()
        app.rawReceiptType = environment.rawValue
        app.bundleId = credentials.bundleId
        app.applicationVersion = "1"
        app.originalApplicationVersion = "1"
        app.receiptCreationDate = TestPayloads.wholeMilliseconds(Date())
        app.originalPurchaseDate = stored.payload.originalPurchaseDate
        app.appTransactionId = appTransactionId
        app.originalPlatform = .iOS
        return Self.json(AppTransactionInfoResponse(signedAppTransactionInfo: try signer.sign(app)))
    }

    private func finish(_ request: HTTPRequest) throws -> HTTPResponse {
        let id = parameter(request, "id")
        guard
            state.withLock({ state in
                guard state.transactions.contains(where: { $0.payload.transactionId == id }) else { return false }
                state.finished.append(id)
                return true
            })
        else { throw Self.notFound }
        return HTTPResponse(status: 200)
    }

    private func refunds(_ request: HTTPRequest) throws -> HTTPResponse {
        let purchase = family(of: parameter(request, "id"), in: state.withLock { $0.transactions })
        guard !purchase.isEmpty else { throw Self.notFound }
        let page = try page(
            purchase.filter { $0.payload.revocationDate != nil }.map(\.signed), token: request.query("revision"), prefix: "rev-",
            invalid: Failure(status: 400, errorCode: 4_000_005, message: "Invalid request revision."))
        return Self.json(RefundHistoryResponse(signedTransactions: page.items, revision: page.next, hasMore: page.hasMore))
    }

    private func appAccountToken(_ request: HTTPRequest) throws -> HTTPResponse {
        let id = parameter(request, "id")
        guard let body = try? AppStoreJSON.decoder().decode(UpdateAppAccountTokenRequest.self, from: Data(request.body)) else {
            throw Failure(status: 400, errorCode: 4_000_033, message: "Invalid app account token.")
        }
        enum Outcome { case set, notFound, notOriginal, family }
        let outcome = state.withLock { state -> Outcome in
            if let purchase = state.transactions.first(where: { $0.payload.originalTransactionId == id }) {
                // Apple refuses family-shared transactions: the member made no purchase in the app.
                if purchase.payload.inAppOwnershipType == .familyShared { return .family }
                state.appAccountTokens[id] = body.appAccountToken
                return .set
            }
            return state.transactions.contains { $0.payload.transactionId == id } ? .notOriginal : .notFound
        }
        switch outcome {
        case .set: return HTTPResponse(status: 200)
        case .family:
            throw Failure(
                status: 400, errorCode: 4_000_185, message: "Invalid request. Family Sharing transactions aren't supported by this endpoint.")
        case .notOriginal:
            throw Failure(
                status: 400, errorCode: 4_000_187, message: "Invalid request. The transaction ID provided is not an original transaction ID.")
        case .notFound: throw Failure(status: 404, errorCode: 4_040_005, message: "Original transaction id not found.")
        }
    }
}
