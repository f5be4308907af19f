import AppStore
import Crypto
import Foundation
import HTTPServer
import Pipeline
import Postgres
import ServiceRuntime
import Storage
import Synchronization

/// App Store Server Notifications V2: `POST /api/v1/iap/apple/notifications/{production,sandbox}`.
///
/// Thin on purpose: refuse bad requests before reading them, verify the outer signature, make the
/// event durable (answering 200 only then), publish. Business processing is the workers' job, so a
/// notification is never refused for what it says, only for who signed it and for whom.
struct NotificationRoutes: Sendable {
    static let prefix = "/api/v1/iap/apple/notifications"
    static let productionPath = prefix + "/production"
    static let sandboxPath = prefix + "/sandbox"

    let verifier: SignedDataVerifier
    let intake: NotificationIntake
    let cipher: PayloadCipher
    /// The Apple endpoints' budgets per source.
    let limits: NotificationLimits
    let refusals: ThrottledLog
    let logger: Logger
    /// Whether an environment's notifications are forwarded (`WebhookConfiguration.forwards`):
    /// only then is Apple's request body worth keeping.
    var forwards: @Sendable (String) -> Bool = { _ in false }
    private let received = MetricsRegistry.shared.counter(
        "subs_notifications_received_total", help: "Notification requests that passed verification")

    func register(in notifications: inout RouterGroup<IngressRequestContext>) {
        notifications.post("production") { request in try await receive(request, endpoint: .production) }
        notifications.post("sandbox") { request in try await receive(request, endpoint: .sandbox) }
    }

    static func count(_ reason: String) {
        MetricsRegistry.shared.counter(
            "subs_notifications_refused_total", help: "Notification requests refused, by reason",
            labels: ["reason": reason]
        ).increment()
    }

    private struct Body: Decodable {
        let signedPayload: String
    }

    func receive(_ request: HTTPRequest, endpoint: AppStoreEnvironment) async throws -> HTTPResponse {
        let body: Body
        do {
            // The verifier's fast, strict parser: Foundation's decoder spent longer on this 10 KB
            // string than the rest of the request's JSON work.
            body = try AppStoreJSON.decode(Body.self, from: request.body)
        } catch {
            try spendUnverified(request)
            Self.count("malformed")
            throw APIError.invalidRequest("the body must be a JSON object with a string signedPayload")
        }
        let payload: ResponseBodyV2DecodedPayload
        do {
            payload = try await verifier.verifyNotification(body.signedPayload, expectedEnvironment: endpoint)
        } catch {
            try spendUnverified(request)
            Self.count(error.code.rawValue.lowercased())
            refusals.record(
                "notification refused", reason: error.code.rawValue,
                [
                    "error.code": .string(error.code.rawValue), "error.reason": .string(error.reason),
                    "appstore.endpoint": .string(endpoint.rawValue), "trace.id": .string(request.traceID),
                ])
            throw Self.httpError(for: error)
        }
        guard let uuid = payload.notificationUUID, !uuid.isEmpty, uuid.count <= 128,
            let type = payload.rawNotificationType, !type.isEmpty
        else {
            Self.count("malformed")
            throw HTTPError(status: 400, code: "MALFORMED", message: "notificationUUID and notificationType are required")
        }
        // Only what Apple signed spends Apple's budget: junk from the same source cannot starve it.
        guard limits.verified.allow(request.head.clientAddress) else {
            Self.count("rate_limited")
            throw APIError.rateLimited()
        }
        received.increment()
        let environment =
            payload.data?.rawEnvironment ?? payload.summary?.rawEnvironment ?? payload.appData?.rawEnvironment ?? endpoint.rawValue
        let event: NewNotificationEvent
        do {
            event = try NewNotificationEvent.sealing(
                signedPayload: body.signedPayload, notificationUUID: uuid, type: type, subtype: payload.rawSubtype,
                environment: environment, signedDate: payload.signedDate,
                signedTransactionInfo: payload.data?.signedTransactionInfo, cipher: cipher, traceID: request.traceID,
                requestBody: forwards(environment) ? request.body : nil)
        } catch {
            throw APIError.serviceUnavailable("could not seal the payload")
        }
        let stored: StoredEvent
        do {
            stored = try await intake.accept(event)
        } catch let error as UnstorableNotification {
            Self.count("malformed")
            throw APIError.invalidRequest("the field \(error.field) holds a character that cannot be stored")
        } catch {
            // Never 200 for an event that is not durable: Apple retries a 5xx.
            Self.count("storage_unavailable")
            logger.error(
                "notification not stored", ["error": .string("\(error)"), "trace.id": .string(request.traceID)])
            throw APIError.serviceUnavailable("the notification could not be stored; retry later")
        }
        // Debug, not info: a line per notification cost more CPU than storing it. The row, its
        // trace id and the counters are the record; LOG_LEVEL=debug brings the line back.
        if logger.level <= .debug {
            logger.debug(
                "notification accepted",
                [
                    "appstore.notification_uuid": .string(uuid), "appstore.notification_type": .string(type),
                    "appstore.subtype": .string(payload.rawSubtype ?? ""), "appstore.environment": .string(environment),
                    "appstore.original_transaction_id": .string(event.originalTransactionID ?? ""),
                    "idempotency.result": .string(stored.isNew ? "new" : "duplicate"), "trace.id": .string(request.traceID),
                ])
        }
        return Accepted(status: stored.isNew ? "accepted" : "duplicate", notificationUUID: uuid).response
    }

    /// A request that failed verification draws from its source's own, smaller budget; beyond it
    /// the answer is 429 instead of the refusal (and nothing is logged).
    private func spendUnverified(_ request: HTTPRequest) throws(HTTPError) {
        guard limits.unverified.allow(request.head.clientAddress) else {
            Self.count("rate_limited_unverified")
            throw APIError.rateLimited()
        }
    }

    struct Accepted: Encodable {
        let status: String
        let notificationUUID: String

        /// Written directly when the UUID needs no escaping (always, from Apple): JSONEncoder cost
        /// more than building the rest of the answer.
        var response: HTTPResponse {
            guard
                notificationUUID.utf8.allSatisfy({
                    $0 == UInt8(ascii: "-") || (0x30...0x39).contains($0)
                        || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0)
                })
            else { return .json(self) }
            return HTTPResponse(
                status: 200, headers: [("Content-Type", "application/json")],
                body: Array(#"{"notificationUUID":"\#(notificationUUID)","status":"\#(status)"}"#.utf8))
        }
    }

    /// Verification failures are the sender's problem (4xx, never retried by us), except an
    /// unavailable revocation check, which Apple should retry (503).
    static func httpError(for error: VerificationError) -> HTTPError {
        let status: Int
        switch error.code {
        case .malformed, .invalidEnvironment: status = 400
        case .invalidSignature, .invalidChain: status = 401
        case .invalidApp: status = 403
        case .retryableVerification: status = 503
        }
        return HTTPError(status: status, code: error.code.rawValue, message: "the signed payload was refused")
    }
}

/// The Apple endpoints' token buckets per source (`HTTPRequestHead.clientAddress`): one for
/// what verified, one for what did not.
struct NotificationLimits: Sendable {
    let verified: RateLimiter
    let unverified: RateLimiter

    init(configuration: IngressConfiguration) {
        verified = RateLimiter(
            ratePerSecond: Double(configuration.notificationRatePerSecond), burst: Double(configuration.notificationRateBurst))
        unverified = RateLimiter(
            ratePerSecond: Double(configuration.unverifiedRatePerSecond), burst: Double(configuration.unverifiedRateBurst))
    }
}

/// What the server checks on a notification's head, before any body byte is read: the media
/// type. (Rates are charged after verification, when it is known whose budget to spend.)
struct NotificationAdmission: Sendable {
    /// The refusal for this head, nil to let the request through (any other route passes).
    func check(_ head: HTTPRequestHead) -> HTTPResponse? {
        guard head.method == "POST", head.path == NotificationRoutes.productionPath || head.path == NotificationRoutes.sandboxPath
        else { return nil }
        if !Self.isJSON(contentType: head.headers["content-type"]) {
            NotificationRoutes.count("unsupported_media_type")
            return APIError.unsupportedMediaType().response(traceID: head.traceID)
        }
        return nil
    }

    /// `application/json`, any case, parameters (`; charset=utf-8`) and blanks around it allowed.
    /// On bytes: this runs before every notification is read.
    static func isJSON(contentType: String?) -> Bool {
        guard let contentType else { return false }
        let blank: (UInt8) -> Bool = { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
        let type = contentType.utf8.prefix { $0 != UInt8(ascii: ";") }.drop(while: blank).reversed().drop(while: blank)
        return type.reversed().map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }.elementsEqual("application/json".utf8)
    }
}

/// Token buckets per source address, bounded in memory: the oldest idle buckets are dropped.
final class RateLimiter: Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }
    private let buckets = Mutex<[String: Bucket]>([:])
    private let ratePerSecond: Double
    private let burst: Double
    private let maxSources = 100_000

    init(ratePerSecond: Double, burst: Double) {
        self.ratePerSecond = ratePerSecond
        self.burst = burst
    }

    func allow(_ source: String) -> Bool {
        let now = ContinuousClock.now
        return buckets.withLock { buckets in
            if buckets.count >= maxSources { buckets = buckets.filter { now - $0.value.updated < .seconds(10) } }
            var bucket = buckets[source] ?? Bucket(tokens: burst, updated: now)
            let elapsed = now - bucket.updated
            let seconds = elapsed.inSeconds
            bucket.tokens = min(burst, bucket.tokens + seconds * ratePerSecond)
            bucket.updated = now
            let allowed = bucket.tokens >= 1
            if allowed { bucket.tokens -= 1 }
            buckets[source] = bucket
            return allowed
        }
    }
}
