import Dispatch
import Foundation
import FoundationNetworking
import ServiceRuntime
import Synchronization

/// A client of the App Store Server API (https://developer.apple.com/documentation/appstoreserverapi).
///
/// Every call authenticates with a cached ES256 token (re-signed once when Apple answers 401),
/// retries transport failures, timeouts, 429, 5xx without an Apple code and Apple's retryable
/// codes (4040002, 4040004, 4040006, 5000001, 4290000) with exponential back-off and full
/// jitter (Retry-After when sent), and fails at once on every other Apple code, keeping it raw.
/// Calls that look a transaction up can fall back from Production to Sandbox when the caller
/// asks (Apple's advice for a transaction id Production does not know).
///
/// Sendable: the configuration is immutable, URLSession is thread-safe, the token cache
/// guards itself.
public final class AppStoreServerAPIClient: Sendable {
    public let configuration: AppStoreServerAPIConfiguration
    private let session: URLSession
    private let tokens: AppStoreAPITokenSource
    private let logger: Logger

    public init(
        configuration: AppStoreServerAPIConfiguration, clock: any WallClock = SystemClock(),
        logger: Logger = Logger(label: "appstore.api")
    ) {
        self.configuration = configuration
        let sessionConfiguration = URLSessionConfiguration.ephemeral
        sessionConfiguration.timeoutIntervalForRequest = URLSessionExchange.wholeSeconds(configuration.timeouts.read)
        sessionConfiguration.timeoutIntervalForResource = URLSessionExchange.wholeSeconds(configuration.timeouts.total)
        sessionConfiguration.httpCookieAcceptPolicy = .never
        sessionConfiguration.urlCache = nil
        session = URLSession(configuration: sessionConfiguration)
        tokens = AppStoreAPITokenSource(configuration: configuration, clock: clock)
        self.logger = logger
    }

    deinit { session.invalidateAndCancel() }

    // MARK: Endpoints

    /// Get All Subscription Statuses, optionally only those with the given statuses.
    public func getAllSubscriptionStatuses(
        transactionId: String, status: [Status] = [], fallbackToSandbox: Bool = false
    ) async throws(AppStoreAPIError) -> StatusResponse {
        let query = status.map { URLQueryItem(name: "status", value: String($0.rawValue)) }
        return try await decode(
            lookingUp: transactionId, fallbackToSandbox: fallbackToSandbox,
            Request(method: "GET", path: "/inApps/v1/subscriptions/\(try segment(transactionId))", query: query))
    }

    /// Get Transaction Info.
    public func getTransactionInfo(transactionId: String, fallbackToSandbox: Bool = false) async throws(AppStoreAPIError)
        -> TransactionInfoResponse
    {
        try await decode(
            lookingUp: transactionId, fallbackToSandbox: fallbackToSandbox,
            Request(method: "GET", path: "/inApps/v1/transactions/\(try segment(transactionId))"))
    }

    /// Get App Transaction Info: the app transaction (with its `appTransactionId`, one per Apple
    /// Account and app) of the customer any of whose transaction ids is given.
    public func getAppTransactionInfo(transactionId: String, fallbackToSandbox: Bool = false) async throws(AppStoreAPIError)
        -> AppTransactionInfoResponse
    {
        try await decode(
            lookingUp: transactionId, fallbackToSandbox: fallbackToSandbox,
            Request(method: "GET", path: "/inApps/v1/transactions/appTransactions/\(try segment(transactionId))"))
    }

    /// Get Transaction History (v2): one page; pass the previous page's `revision` for the next.
    public func getTransactionHistory(
        transactionId: String, revision: String? = nil, request filters: TransactionHistoryRequest = TransactionHistoryRequest(),
        fallbackToSandbox: Bool = false
    ) async throws(AppStoreAPIError) -> HistoryResponse {
        var query = filters.queryItems
        if let revision { query.insert(URLQueryItem(name: "revision", value: revision), at: 0) }
        return try await decode(
            lookingUp: transactionId, fallbackToSandbox: fallbackToSandbox,
            Request(method: "GET", path: "/inApps/v2/history/\(try segment(transactionId))", query: query))
    }

    /// Get Notification History: one page; pass the previous page's `paginationToken` for the next.
    public func getNotificationHistory(paginationToken: String? = nil, request filters: NotificationHistoryRequest)
        async throws(AppStoreAPIError) -> NotificationHistoryResponse
    {
        let query = paginationToken.map { [URLQueryItem(name: "paginationToken", value: $0)] } ?? []
        return try await decode(
            Request(method: "POST", path: "/inApps/v1/notifications/history", query: query, body: try json(filters)))
    }

    /// Request a Test Notification (Apple then posts a TEST notification to the configured URL).
    public func requestTestNotification() async throws(AppStoreAPIError) -> SendTestNotificationResponse {
        try await decode(Request(method: "POST", path: "/inApps/v1/notifications/test"))
    }

    /// Get Test Notification Status.
    public func getTestNotificationStatus(testNotificationToken: String) async throws(AppStoreAPIError)
        -> CheckTestNotificationResponse
    {
        try await decode(Request(method: "GET", path: "/inApps/v1/notifications/test/\(try segment(testNotificationToken))"))
    }

    /// Send Consumption Information (answer to a CONSUMPTION_REQUEST notification; not V1, which
    /// Apple reserves for Advanced Commerce).
    public func sendConsumptionInformation(transactionId: String, _ consumption: ConsumptionRequest) async throws(AppStoreAPIError) {
        _ = try await send(
            Request(
                method: "PUT", path: "/inApps/v2/transactions/consumption/\(try segment(transactionId))",
                body: try json(consumption)),
            environment: configuration.environment)
    }

    /// Extend a Subscription Renewal Date.
    public func extendSubscriptionRenewalDate(originalTransactionId: String, _ extension: ExtendRenewalDateRequest)
        async throws(AppStoreAPIError) -> ExtendRenewalDateResponse
    {
        try await decode(
            Request(
                method: "PUT", path: "/inApps/v1/subscriptions/extend/\(try segment(originalTransactionId))",
                body: try json(`extension`)))
    }

    /// Extend Subscription Renewal Dates for All Active Subscribers: Apple accepts the request and
    /// works through the product's subscribers asynchronously (follow it with
    /// `getStatusOfSubscriptionRenewalDateExtensions`).
    public func extendRenewalDateForAllActiveSubscribers(_ request: MassExtendRenewalDateRequest) async throws(AppStoreAPIError)
        -> MassExtendRenewalDateResponse
    {
        try await decode(Request(method: "POST", path: "/inApps/v1/subscriptions/extend/mass", body: try json(request)))
    }

    /// Get Status of Subscription Renewal Date Extensions of a mass request.
    public func getStatusOfSubscriptionRenewalDateExtensions(productId: String, requestIdentifier: String)
        async throws(AppStoreAPIError) -> MassExtendRenewalDateStatusResponse
    {
        try await decode(
            Request(
                method: "GET",
                path: "/inApps/v1/subscriptions/extend/mass/\(try segment(productId))/\(try segment(requestIdentifier))"))
    }

    /// Finish Transaction: tells Apple the server has delivered what the transaction bought (for
    /// apps whose server, not StoreKit's `Transaction.finish()`, completes delivery).
    public func finishTransaction(transactionId: String) async throws(AppStoreAPIError) {
        _ = try await send(
            Request(method: "POST", path: "/inApps/v1/transactions/\(try segment(transactionId))/finish"),
            environment: configuration.environment)
    }

    /// Get Refund History (v2): one page; pass the previous page's `revision` for the next.
    public func getRefundHistory(transactionId: String, revision: String? = nil, fallbackToSandbox: Bool = false)
        async throws(AppStoreAPIError) -> RefundHistoryResponse
    {
        let query = revision.map { [URLQueryItem(name: "revision", value: $0)] } ?? []
        return try await decode(
            lookingUp: transactionId, fallbackToSandbox: fallbackToSandbox,
            Request(method: "GET", path: "/inApps/v2/refund/lookup/\(try segment(transactionId))", query: query))
    }

    /// Set App Account Token of a purchase.
    public func setAppAccountToken(originalTransactionId: String, _ token: UpdateAppAccountTokenRequest)
        async throws(AppStoreAPIError)
    {
        _ = try await send(
            Request(
                method: "PUT", path: "/inApps/v1/transactions/\(try segment(originalTransactionId))/appAccountToken",
                body: try json(token)),
            environment: configuration.environment)
    }

    // MARK: Retention Messaging API (https://developer.apple.com/documentation/retentionmessaging)

    /// Upload Message: the text (and optional image, bullet points) of a retention message under
    /// our UUID; Apple reviews it before it can be shown (`messageState`).
    public func uploadMessage(messageIdentifier: UUID, _ message: UploadMessageRequestBody) async throws(AppStoreAPIError) {
        _ = try await send(
            Request(method: "PUT", path: "/inApps/v1/messaging/message/\(Self.segment(messageIdentifier))", body: try json(message)),
            environment: configuration.environment)
    }

    /// Get Message List: every uploaded message with its approval state.
    public func getMessageList() async throws(AppStoreAPIError) -> GetMessageListResponse {
        try await decode(Request(method: "GET", path: "/inApps/v1/messaging/message/list"))
    }

    /// Delete Message (not idempotent: Apple answers 4040015 for a message it does not have).
    public func deleteMessage(messageIdentifier: UUID) async throws(AppStoreAPIError) {
        _ = try await send(
            Request(method: "DELETE", path: "/inApps/v1/messaging/message/\(Self.segment(messageIdentifier))"),
            environment: configuration.environment)
    }

    /// Upload Image: a PNG without transparency, sent as it is (`image/png`), for a message
    /// (`FULL_SIZE`) or a bullet point (`BULLET_POINT`).
    public func uploadImage(imageIdentifier: UUID, png: Data, imageSize: RetentionImageSize? = nil) async throws(AppStoreAPIError) {
        let query = imageSize.map { [URLQueryItem(name: "imageSize", value: $0.rawValue)] } ?? []
        _ = try await send(
            Request(
                method: "PUT", path: "/inApps/v1/messaging/image/\(Self.segment(imageIdentifier))", query: query, body: png,
                contentType: "image/png"),
            environment: configuration.environment)
    }

    /// Get Image List: every uploaded image with its approval state and size.
    public func getImageList() async throws(AppStoreAPIError) -> GetImageListResponse {
        try await decode(Request(method: "GET", path: "/inApps/v1/messaging/image/list"))
    }

    /// Delete Image (Apple refuses one a message still uses: 4030019).
    public func deleteImage(imageIdentifier: UUID) async throws(AppStoreAPIError) {
        _ = try await send(
            Request(method: "DELETE", path: "/inApps/v1/messaging/image/\(Self.segment(imageIdentifier))"),
            environment: configuration.environment)
    }

    /// Configure Default Message: the approved message Apple shows for a product and locale when
    /// our endpoint gives no usable answer.
    public func configureDefaultMessage(productId: String, locale: String, messageIdentifier: UUID) async throws(AppStoreAPIError) {
        _ = try await send(
            Request(
                method: "PUT", path: "/inApps/v1/messaging/default/\(try segment(productId))/\(try segment(locale))",
                body: try json(DefaultConfiguration(messageIdentifier: messageIdentifier))),
            environment: configuration.environment)
    }

    /// Get Default Message of a product and locale (4040020 when none is configured).
    public func getDefaultMessage(productId: String, locale: String) async throws(AppStoreAPIError) -> DefaultConfiguration {
        try await decode(Request(method: "GET", path: "/inApps/v1/messaging/default/\(try segment(productId))/\(try segment(locale))"))
    }

    /// Delete Default Message of a product and locale.
    public func deleteDefaultMessage(productId: String, locale: String) async throws(AppStoreAPIError) {
        _ = try await send(
            Request(method: "DELETE", path: "/inApps/v1/messaging/default/\(try segment(productId))/\(try segment(locale))"),
            environment: configuration.environment)
    }

    // MARK: Machinery

    private struct Request {
        var method: String
        var path: String
        var query: [URLQueryItem] = []
        var body: Data?
        var contentType = "application/json"
    }

    /// Apple's message and image identifiers, as we write them everywhere: lowercase.
    private static func segment(_ identifier: UUID) -> String { identifier.uuidString.lowercased() }

    /// Identifiers go into the path unescaped, so only characters that need no escaping pass.
    private func segment(_ identifier: String) throws(AppStoreAPIError) -> String {
        let allowed = identifier.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."):
                true
            default: false
            }
        }
        guard allowed, !identifier.isEmpty, identifier.utf8.count <= 128, identifier != ".", identifier != ".." else {
            throw AppStoreAPIError(kind: .invalidRequest, message: "identifier is not a plain path segment", attempts: 0)
        }
        return identifier
    }

    private func json(_ value: some Encodable) throws(AppStoreAPIError) -> Data {
        do { return try AppStoreJSON.encoder().encode(value) } catch {
            throw AppStoreAPIError(kind: .invalidRequest, message: "request body does not encode: \(error)", attempts: 0)
        }
    }

    private func decode<Response: Decodable>(
        lookingUp transactionId: String? = nil, fallbackToSandbox: Bool = false, _ request: Request
    ) async throws(AppStoreAPIError) -> Response {
        let body: Data
        do {
            body = try await send(request, environment: configuration.environment)
        } catch
            where fallbackToSandbox && configuration.environment == .production
            && (error.apiError == .transactionIdNotFound || error.apiError == .originalTransactionIdNotFound)
        {
            logger.info("transaction unknown in Production, asking Sandbox", ["appstore.path": .string(request.path)])
            body = try await send(request, environment: .sandbox)
        }
        do { return try AppStoreJSON.sharedDecoder.decode(Response.self, from: body) } catch {
            throw AppStoreAPIError(
                kind: .invalidResponse, statusCode: 200, message: "response is not a JSON \(Response.self)", attempts: 1)
        }
    }

    /// One API call: requests, retries and back-off until success, a final error or the total timeout.
    private func send(_ request: Request, environment: AppStoreEnvironment) async throws(AppStoreAPIError) -> Data {
        let clock = ContinuousClock()
        let deadline = clock.now + configuration.timeouts.total
        let policy = configuration.retryPolicy
        var components = URLComponents(url: configuration.baseURL(for: environment), resolvingAgainstBaseURL: false)!
        components.path = (components.path.hasSuffix("/") ? String(components.path.dropLast()) : components.path) + request.path
        components.queryItems = request.query.isEmpty ? nil : request.query
        guard let url = components.url else {
            throw AppStoreAPIError(kind: .invalidRequest, message: "cannot build the request URL", attempts: 0)
        }
        var requests = 0
        var retries = 0
        var resigned = false
        while true {
            let token = try tokens.token()
            var urlRequest = URLRequest(url: url)
            urlRequest.httpMethod = request.method
            urlRequest.httpBody = request.body
            urlRequest.timeoutInterval = URLSessionExchange.wholeSeconds(configuration.timeouts.read)
            urlRequest.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
            urlRequest.setValue("application/json", forHTTPHeaderField: "Accept")
            if request.body != nil { urlRequest.setValue(request.contentType, forHTTPHeaderField: "Content-Type") }
            let remaining = deadline - clock.now
            requests += 1
            let failure: AppStoreAPIError
            var retryAfter: Duration?
            do {
                let attemptLimit = min(configuration.timeouts.connect + configuration.timeouts.read, remaining)
                let (data, response) = try await perform(urlRequest, limit: attemptLimit, attempt: requests)
                Self.countResponse(status: response.statusCode)
                if (200..<300).contains(response.statusCode) { return data }
                let apple = try? JSONDecoder().decode(AppleErrorBody.self, from: data)
                if response.statusCode == 401 && !resigned {
                    // An expired or rotated key's token: sign a new one once, without counting it as a retry.
                    resigned = true
                    tokens.invalidate(token)
                    logger.warning("App Store Server API refused the token, signing a new one", ["appstore.path": .string(request.path)])
                    continue
                }
                failure = AppStoreAPIError(
                    kind: .api, statusCode: response.statusCode, rawAPIError: apple?.errorCode,
                    message: apple?.errorMessage ?? "HTTP \(response.statusCode) without an Apple error body", attempts: requests)
                retryAfter = Self.retryAfter(response)
            } catch {
                Self.countResponse(status: nil)
                failure = AppStoreAPIError(
                    kind: error.kind, statusCode: error.statusCode, rawAPIError: error.rawAPIError, message: error.message,
                    attempts: requests)
            }
            guard failure.isRetryable, retries + 1 < policy.maxAttempts else { throw failure }
            retries += 1
            let delay = retryAfter ?? policy.backoff(retry: retries)
            guard clock.now + delay < deadline else {
                throw AppStoreAPIError(
                    kind: failure.kind == .api ? .api : .timeout, statusCode: failure.statusCode, rawAPIError: failure.rawAPIError,
                    message: "\(failure.message) (no time left for another try within \(configuration.timeouts.total))",
                    attempts: requests)
            }
            logger.warning(
                "App Store Server API call failed, retrying",
                [
                    "appstore.path": .string(request.path), "appstore.error": .string(failure.description),
                    "appstore.retry_in_ms": .int(Int64(AppStoreAPIRetryPolicy.seconds(delay) * 1000)),
                ])
            do { try await Task.sleep(for: delay) } catch {
                throw AppStoreAPIError(kind: .timeout, message: "cancelled while waiting to retry", attempts: requests)
            }
        }
    }

    private struct AppleErrorBody: Decodable {
        let errorCode: Int64?
        let errorMessage: String?
    }

    /// Retry-After in seconds or as an HTTP date; nil when absent or unreadable.
    /// `appstore_server_api_responses_total` by status: 2xx, 401, 403, 429, 4xx, 5xx, or `error`
    /// when no answer came (transport failure, timeout); the alerts on 429 and 5xx and on 401/403
    /// (a revoked key or wrong issuer) read it.
    static func countResponse(status: Int?) {
        let label: String
        switch status {
        case nil: label = "error"
        case 401, 403, 429: label = String(status!)
        case let code?: label = "\(min(max(code / 100, 1), 5))xx"
        }
        MetricsRegistry.shared.counter(
            "appstore_server_api_responses_total", help: "App Store Server API answers by status (error: none came)",
            labels: ["status": label]
        ).increment()
    }

    static func retryAfter(_ response: HTTPURLResponse) -> Duration? {
        let value = response.allHeaderFields.first { ($0.key as? String)?.lowercased() == "retry-after" }?.value as? String
        guard let value = value?.trimmingCharacters(in: .whitespaces) else { return nil }
        if let seconds = Int(value), seconds >= 0 { return .seconds(seconds) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: value) else { return nil }
        return .seconds(max(0, date.timeIntervalSinceNow.rounded(.up)))
    }

    /// One HTTP exchange, cancelled when `limit` passes or the calling task is cancelled.
    private func perform(_ request: URLRequest, limit: Duration, attempt: Int) async throws(AppStoreAPIError)
        -> (Data, HTTPURLResponse)
    {
        switch await URLSessionExchange.perform(request, on: session, limit: limit) {
        case .success(let answer): return answer
        case .failure(.timedOut): throw AppStoreAPIError(kind: .timeout, message: "request timed out", attempts: attempt)
        case .failure(.transport(let message)): throw AppStoreAPIError(kind: .transport, message: message, attempts: attempt)
        }
    }
}
