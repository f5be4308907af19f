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
        /// The request's Content-Type, when it had one.
        public var contentType: String? = nil
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
        var messages: [String: RetentionMessage] = [:]
        var images: [String: RetentionImage] = [:]
        /// Default messages by "productId/locale".
        var defaultMessages: [String: String] = [:]
    }

    /// An uploaded retention message and Apple's review of it (PENDING until a test decides).
    private struct RetentionMessage {
        var body: UploadMessageRequestBody
        var state: RetentionReviewState
    }

    /// An uploaded retention image, its size and Apple's review of it.
    private struct RetentionImage {
        var png: [UInt8]
        var size: String
        var state: RetentionReviewState
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
        router.put("/inApps/v1/messaging/message/{id}") { [self] in await serve($0) { try self.uploadMessage($0) } }
        router.get("/inApps/v1/messaging/message/list") { [self] in await serve($0) { try self.messageList($0) } }
        router.delete("/inApps/v1/messaging/message/{id}") { [self] in await serve($0) { try self.deleteMessage($0) } }
        router.put("/inApps/v1/messaging/image/{id}") { [self] in await serve($0) { try self.uploadImage($0) } }
        router.get("/inApps/v1/messaging/image/list") { [self] in await serve($0) { try self.imageList($0) } }
        router.delete("/inApps/v1/messaging/image/{id}") { [self] in await serve($0) { try self.deleteImage($0) } }
        router.put("/inApps/v1/messaging/default/{productId}/{locale}") { [self] in await serve($0) { try self.configureDefault($0) } }
        router.get("/inApps/v1/messaging/default/{productId}/{locale}") { [self] in await serve($0) { try self.getDefault($0) } }
        router.delete("/inApps/v1/messaging/default/{productId}/{locale}") { [self] in await serve($0) { try self.deleteDefault($0) } }
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

    /// Apple's review of an uploaded message (as App Review would decide it).
    public func review(message identifier: UUID, _ state: RetentionReviewState) {
        self.state.withLock { $0.messages[identifier.uuidString.lowercased()]?.state = state }
    }

    /// Apple's review of an uploaded image.
    public func review(image identifier: UUID, _ state: RetentionReviewState) {
        self.state.withLock { $0.images[identifier.uuidString.lowercased()]?.state = state }
    }

    /// The message uploaded under `identifier`, nil when there is none.
    public func uploadedMessage(_ identifier: UUID) -> UploadMessageRequestBody? {
        state.withLock { $0.messages[identifier.uuidString.lowercased()]?.body }
    }

    /// The PNG bytes uploaded under `identifier`, nil when there are none.
    public func uploadedImage(_ identifier: UUID) -> [UInt8]? { state.withLock { $0.images[identifier.uuidString.lowercased()]?.png } }

    /// The default message configured for a product and locale.
    public func defaultMessage(productId: String, locale: String) -> String? {
        state.withLock { $0.defaultMessages["\(productId)/\(locale)"] }
    }

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
                    authorized: problem == nil, authorizationProblem: problem, contentType: request.header("content-type")))
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

    // MARK: Retention Messaging API

    private static let badRequest = Failure(status: 400, errorCode: 4_000_000, message: "Bad request.")

    /// A path identifier Apple takes as a UUID, lowercased as the mock keys it.
    private func uuidParameter(_ request: HTTPRequest, _ name: String = "id") throws -> String {
        guard let id = UUID(uuidString: parameter(request, name)) else { throw Self.badRequest }
        return id.uuidString.lowercased()
    }

    /// Apple's checks of UploadMessageRequestBody: the documented lengths, at most five bullet
    /// points, a header above an image only with an image; an identifier is used once.
    private func uploadMessage(_ request: HTTPRequest) throws -> HTTPResponse {
        let id = try uuidParameter(request)
        guard let body = try? AppStoreJSON.decoder().decode(UploadMessageRequestBody.self, from: Data(request.body)) else {
            throw Self.badRequest
        }
        typealias Limits = UploadMessageRequestBody
        guard body.header.count <= Limits.maxHeaderLength else {
            throw Failure(status: 400, errorCode: 4_000_162, message: "Header text is too long.")
        }
        guard body.body.count <= Limits.maxBodyLength else {
            throw Failure(status: 400, errorCode: 4_000_163, message: "Body text is too long.")
        }
        let bullets = body.bulletPoints ?? []
        guard bullets.count <= Limits.maxBulletPoints else {
            throw Failure(status: 400, errorCode: 4_000_218, message: "Too many bullet points.")
        }
        guard bullets.allSatisfy({ $0.text.count <= Limits.maxBulletPointTextLength }) else {
            throw Failure(status: 400, errorCode: 4_000_219, message: "Bullet point text is too long.")
        }
        let altTexts = (body.image.map { [$0.altText] } ?? []) + bullets.map(\.altText)
        guard altTexts.allSatisfy({ $0.count <= Limits.maxAltTextLength }) else {
            throw Failure(status: 400, errorCode: 4_000_175, message: "Alt text is too long.")
        }
        guard body.headerPosition != .aboveImage || body.image != nil else {
            throw Failure(status: 400, errorCode: 4_000_224, message: "A header above an image requires an image.")
        }
        let added = state.withLock { state -> Bool in
            guard state.messages[id] == nil else { return false }
            state.messages[id] = RetentionMessage(body: body, state: .pending)
            return true
        }
        guard added else { throw Failure(status: 409, errorCode: 4_090_001, message: "Message already exists.") }
        return HTTPResponse(status: 200)
    }

    private func messageList(_ request: HTTPRequest) throws -> HTTPResponse {
        let items = state.withLock { $0.messages }.sorted { $0.key < $1.key }.map {
            GetMessageListResponseItem(messageIdentifier: $0.key, messageState: $0.value.state)
        }
        return Self.json(GetMessageListResponse(messageIdentifiers: items))
    }

    private func deleteMessage(_ request: HTTPRequest) throws -> HTTPResponse {
        let id = try uuidParameter(request)
        guard state.withLock({ $0.messages.removeValue(forKey: id) }) != nil else {
            throw Failure(status: 404, errorCode: 4_040_015, message: "Message not found.")
        }
        return HTTPResponse(status: 200)
    }

    /// Apple takes a PNG as the body; `imageSize`, when sent, is FULL_SIZE or BULLET_POINT.
    private func uploadImage(_ request: HTTPRequest) throws -> HTTPResponse {
        let id = try uuidParameter(request)
        let size = request.query("imageSize") ?? RetentionImageSize.fullSize.rawValue
        guard RetentionImageSize(rawValue: size) != nil else {
            throw Failure(status: 400, errorCode: 4_000_216, message: "Invalid image size.")
        }
        guard request.body.starts(with: Self.pngSignature) else {
            throw Failure(status: 400, errorCode: 4_000_161, message: "Invalid image.")
        }
        let added = state.withLock { state -> Bool in
            guard state.images[id] == nil else { return false }
            state.images[id] = RetentionImage(png: request.body, size: size, state: .pending)
            return true
        }
        guard added else { throw Failure(status: 409, errorCode: 4_090_000, message: "Image already exists.") }
        return HTTPResponse(status: 200)
    }

    static let pngSignature: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]

    private func imageList(_ request: HTTPRequest) throws -> HTTPResponse {
        let items = state.withLock { $0.images }.sorted { $0.key < $1.key }.map {
            GetImageListResponseItem(imageIdentifier: $0.key, imageState: $0.value.state, imageSize: $0.value.size)
        }
        return Self.json(GetImageListResponse(imageIdentifiers: items))
    }

    private func deleteImage(_ request: HTTPRequest) throws -> HTTPResponse {
        let id = try uuidParameter(request)
        enum Outcome { case deleted, notFound, inUse }
        let outcome = state.withLock { state -> Outcome in
            guard state.images[id] != nil else { return .notFound }
            let used = state.messages.values.contains { message in
                message.body.image?.imageIdentifier == id || (message.body.bulletPoints ?? []).contains { $0.imageIdentifier == id }
            }
            if used { return .inUse }
            state.images[id] = nil
            return .deleted
        }
        switch outcome {
        case .deleted: return HTTPResponse(status: 200)
        case .notFound: throw Failure(status: 404, errorCode: 4_040_014, message: "Image not found.")
        case .inUse: throw Failure(status: 403, errorCode: 4_030_019, message: "Image is in use.")
        }
    }

    /// The product and locale of a default-message path; Apple refuses a locale it does not know.
    private func defaultKey(_ request: HTTPRequest) throws -> String {
        let locale = parameter(request, "locale")
        guard locale.wholeMatch(of: /[a-z]{2,3}(-[A-Za-z0-9]{2,8})*/) != nil else {
            throw Failure(status: 400, errorCode: 4_000_164, message: "Invalid locale.")
        }
        return "\(parameter(request, "productId"))/\(locale)"
    }

    /// Only an approved message (with an approved image, when it has one) can be a default.
    private func configureDefault(_ request: HTTPRequest) throws -> HTTPResponse {
        let key = try defaultKey(request)
        guard let body = try? AppStoreJSON.decoder().decode(DefaultConfiguration.self, from: Data(request.body)),
            let id = body.messageIdentifier.flatMap(UUID.init(uuidString:))?.uuidString.lowercased()
        else { throw Self.badRequest }
        let refusal = state.withLock { state -> Failure? in
            guard let message = state.messages[id] else {
                return Failure(status: 404, errorCode: 4_040_015, message: "Message not found.")
            }
            guard message.state == .approved else {
                return Failure(status: 403, errorCode: 4_030_017, message: "Message not approved.")
            }
            if let image = message.body.image, state.images[image.imageIdentifier]?.state != .approved {
                return Failure(status: 403, errorCode: 4_030_018, message: "Image not approved.")
            }
            state.defaultMessages[key] = id
            return nil
        }
        if let refusal { throw refusal }
        return HTTPResponse(status: 200)
    }

    private static let noDefault = Failure(status: 404, errorCode: 4_040_020, message: "Default message not found.")

    private func getDefault(_ request: HTTPRequest) throws -> HTTPResponse {
        let key = try defaultKey(request)
        guard let id = state.withLock({ $0.defaultMessages[key] }) else { throw Self.noDefault }
        return Self.json(DefaultConfiguration(rawMessageIdentifier: id))
    }

    private func deleteDefault(_ request: HTTPRequest) throws -> HTTPResponse {
        let key = try defaultKey(request)
        guard state.withLock({ $0.defaultMessages.removeValue(forKey: key) }) != nil else { throw Self.noDefault }
        return HTTPResponse(status: 200)
    }
}
