import Credits
import Foundation
import HTTPServer
import Pipeline
import Postgres
import ServiceRuntime

/// The metering API, for the app's own back-end services (bearer service tokens, never user
/// tokens): `POST /api/v1/credits/usage` deducts a metered call in real time, idempotently per
/// service and key; `GET /api/v1/credits/check` answers whether a call can be afforded now.
struct CreditsRoutes: Sendable {
    /// How far ahead of our clock an event time may be (the callers' clocks are not ours).
    static let futureTolerance: TimeInterval = 300

    let credits: CreditMeter
    let clock: any WallClock
    private let outcomes: [String: Counter] = Dictionary(
        uniqueKeysWithValues: ["accepted", "replayed", "exhausted", "refused"].map {
            (
                $0,
                MetricsRegistry.shared.counter(
                    "subs_credit_usage_total", help: "Metered usage calls by outcome", labels: ["outcome": $0])
            )
        })

    /// Concurrent usage calls share one statement and one commit (the cost of a call was mostly
    /// per round trip and per transaction); each caller still gets its own answer. Two batches in
    /// flight, not more: the server's cost per call falls as batches grow, and one batch running
    /// while the other commits keeps this machine's two cores busy. In the credits benchmark, four
    /// gave 4.4 calls per batch and 0.35 ms of server CPU per call; two gave 7.5 and 0.31 ms.
    private let meter: GroupCommit<(request: UsageRequest, now: Date), Result<UsageOutcome, any Error>>

    init(credits: CreditMeter, clock: any WallClock) {
        self.credits = credits
        self.clock = clock
        meter = GroupCommit(
            maxBatchSize: 64, maxConcurrentBatches: 2,
            sizeMetric: ("subs_credit_usage_batch_size", "Usage calls charged per transaction")
        ) { calls in await credits.use(batch: calls) }
    }

    func register(in metering: inout RouterGroup<IngressRequestContext>) {
        metering.post("usage") { request, context in try await usage(request, service: try context.requireService()) }
        metering.get("check") { request, context in
            _ = try context.requireService()
            return try await check(request)
        }
    }

    struct UsageBody: Decodable {
        let idempotencyKey: String?
        let userId: String
        let units: Int64
        let rate: String
        let occurredAt: Date?
    }

    func usage(_ request: HTTPRequest, service: AuthenticatedService) async throws -> HTTPResponse {
        let body = try request.decodeJSON(UsageBody.self)
        let header = request.header("idempotency-key")
        if let header, let key = body.idempotencyKey, header != key {
            throw APIError.invalidRequest("Idempotency-Key and idempotencyKey differ")
        }
        guard let key = body.idempotencyKey ?? header, OrderRoutes.isAcceptableIdentifier(key, maxLength: 128) else {
            throw APIError.invalidRequest("idempotencyKey (or an Idempotency-Key header) of at most 128 characters is required")
        }
        try Self.validate(userID: body.userId, units: body.units, rate: body.rate)
        let now = clock.now()
        if let occurred = body.occurredAt, occurred.timeIntervalSince(now) > Self.futureTolerance {
            throw APIError.invalidRequest("occurredAt is in the future")
        }
        let usage = UsageRequest(
            service: service.name, idempotencyKey: key, userID: body.userId, units: body.units, rateCode: body.rate,
            occurredAt: body.occurredAt)
        let outcome = try await refusals { try await meter.submit((usage, now)).get() }
        outcomes[outcome.replayed ? "replayed" : "accepted"]?.increment()
        var headers = [("Content-Type", "application/json")]
        if outcome.replayed { headers.append(("Idempotent-Replayed", "true")) }
        return HTTPResponse(status: 200, headers: headers, body: Array(outcome.json.utf8))
    }

    func check(_ request: HTTPRequest) async throws -> HTTPResponse {
        guard let user = request.query("userId"), let rate = request.query("rate"),
            let units = request.query("units").flatMap({ Int64($0) })
        else { throw APIError.invalidRequest("userId, units (an integer) and rate are required") }
        try Self.validate(userID: user, units: units, rate: rate)
        let now = clock.now()
        let answer = try await refusals {
            try await credits.check(userID: user, units: units, rateCode: rate, now: now)
        }
        return .json(answer)
    }

    static func validate(userID: String, units: Int64, rate: String) throws(HTTPError) {
        guard OrderRoutes.isAcceptableIdentifier(userID, maxLength: 128) else {
            throw APIError.invalidRequest("userId is required (at most 128 printable characters)")
        }
        guard (1...CreditMeter.maximumUnits).contains(units) else {
            throw APIError.invalidRequest("units must be between 1 and \(CreditMeter.maximumUnits)")
        }
        guard OrderRoutes.isAcceptableIdentifier(rate, maxLength: 64) else {
            throw APIError.invalidRequest("rate is required (a rate code of at most 64 characters)")
        }
    }

    /// The metering refusals as stable error codes (database trouble as `DatabaseErrors` maps it).
    private func refusals<R>(_ body: () async throws -> R) async throws -> R {
        do {
            return try await body()
        } catch let error as UsageError {
            switch error {
            case .creditsExhausted(let cost, let available):
                outcomes["exhausted"]?.increment()
                throw APIError.creditsExhausted(
                    "the call costs \(CreditAmount.decimal(cost)) credits; \(CreditAmount.decimal(available)) available")
            case .unknownRate(let code):
                outcomes["refused"]?.increment()
                throw APIError.rateUnknown("no version of rate \(code) is in force at the event time")
            case .idempotencyConflict:
                outcomes["refused"]?.increment()
                throw APIError.idempotencyConflict("this idempotency key was used for another request")
            case .costTooLarge:
                outcomes["refused"]?.increment()
                throw APIError.invalidRequest("units × rate exceeds the largest cost of one call")
            case .consentRescinded:
                outcomes["refused"]?.increment()
                throw HTTPError(
                    status: 403, code: "CONSENT_RESCINDED",
                    message: "a parent withdrew consent for this user (RESCIND_CONSENT): no credit is spent; nothing charged")
            }
        }
    }
}
