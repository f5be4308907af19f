import AppStore
import AppStoreTestSupport
import Catalogue
import Crypto
import Foundation
import HTTPServer
import Postgres
import ServiceRuntime
import Synchronization
import TestSupport
import Testing

@testable import IngressApp

/// The ingress's router on a fresh migrated database, called in process: no socket, no broker
/// (events stay in the outbox), no worker. Made and released by `IngressTestApp.with`.
struct IngressTestApp: Sendable {
    static let bundleID = "com.example.subscriptions"

    let database: TestDatabase
    let signer: TestAppleSigner
    let router: Router<IngressRequestContext>
    /// The internal listener's routes (probes and metrics).
    let internalRouter: Router<BasicRequestContext>
    let admission: NotificationAdmission
    /// `INGRESS_TRUSTED_PROXIES`, to attribute requests as the server does.
    let trustedProxies: [AddressRange]
    /// Behind `/readyz`: observes only when a test calls `observe()`; its probes count their calls.
    let readiness: ReadinessMonitor
    let readinessProbes: Counted
    let userTokenSecret: String
    let serviceToken: String
    /// What the ingress logged, to check that it never logs secrets.
    let logs: LogSink
    let environment: [String: String]

    var pool: PostgresPool { database.pool }

    /// Runs `body` with an app on its own database, released afterwards whatever happens.
    /// `extra` overrides any environment variable of the configuration.
    static func with<R>(
        environment appleEnvironment: AppStoreEnvironment = .sandbox, extra: [String: String] = [:],
        _ body: (IngressTestApp) async throws -> R
    ) async throws -> R {
        let database = try await TestDatabase.make("ingress")
        do {
            let app = try make(database: database, appleEnvironment: appleEnvironment, extra: extra)
            let result = try await body(app)
            await database.close()
            return result
        } catch {
            await database.close()
            throw error
        }
    }

    private static func make(database: TestDatabase, appleEnvironment: AppStoreEnvironment, extra: [String: String]) throws
        -> IngressTestApp
    {
        let signer = try TestAppleSigner()
        let secret = Base64URL.encode(SecureRandom.bytes(32))
        let serviceToken = Base64URL.encode(SecureRandom.bytes(32))
        var environment = try signer.verifierEnvironment(
            bundleId: bundleID, environment: appleEnvironment, appAppleId: appleEnvironment == .production ? 1_234_567_890 : nil)
        environment.merge([
            "DATABASE_URL": database.url,
            // Never contacted: nothing here publishes or checks readiness.
            "KAFKA_BROKERS": "127.0.0.1:9",
            "PAYLOAD_ENCRYPTION_KEYS": "k1:" + Data(SecureRandom.bytes(32)).base64EncodedString(),
            "CURSOR_SIGNING_KEY": Data(SecureRandom.bytes(32)).base64EncodedString(),
            "USER_TOKEN_HS256_SECRET": secret,
            "SERVICE_TOKENS": "billing:\(serviceToken)",
            "INGRESS_FULFILLMENT_WAIT_MS": "200",
        ]) { _, new in new }
        environment.merge(extra) { _, new in new }
        let configuration = try IngressConfiguration.load(environment: environment)
        let logs = LogSink.memory()
        let logger = Logger(label: "ingress", level: .info, sink: logs)
        let probes = Counted()
        let readiness = ReadinessMonitor(
            interval: .milliseconds(500), postgres: { probes.increment("ok") }, kafka: { probes.increment("ok") })
        let context = try IngressContext(
            configuration: configuration, pool: database.pool,
            readPool: configuration.readPostgres.map { PostgresPool(configuration: $0, logger: logger) }, publisher: OutboxOnly(),
            readiness: readiness, clock: SystemClock(), logger: logger)
        var router = try buildRouter(context)
        router.logger = logger
        return IngressTestApp(
            database: database, signer: signer, router: router, internalRouter: HealthRoutes(readiness: readiness).internalRouter(),
            admission: NotificationAdmission(), trustedProxies: configuration.trustedProxies, readiness: readiness, readinessProbes: probes,
            userTokenSecret: secret, serviceToken: serviceToken, logs: logs, environment: environment)
    }

    // MARK: Requests

    /// One request as the server would hand it over: the head through the admission check, then
    /// the router. `target` is the path with its query, as sent.
    func request(
        _ method: String, _ target: String, headers: [String: String] = [:], body: [UInt8] = [],
        remoteAddress: String = "127.0.0.1"
    ) async -> TestResponse {
        let (rawPath, query) = Self.split(target)
        let path = RequestPath.normalized(rawPath)
        var fields: [String: String] = [:]
        for (name, value) in headers { fields[name.lowercased()] = value }
        let head = HTTPRequestHead(
            method: method, path: path, query: query, headers: fields, remoteAddress: remoteAddress,
            clientAddress: ClientAddress.resolve(
                peer: remoteAddress, forwardedFor: fields["x-forwarded-for"], trustedProxies: trustedProxies),
            traceID: TraceID.accept(fields["x-request-id"]))
        if let refusal = admission.check(head) { return TestResponse(refusal) }
        return TestResponse(await router.handle(HTTPRequest(head: head, body: body)))
    }

    func get(_ target: String, headers: [String: String] = [:]) async -> TestResponse {
        await request("GET", target, headers: headers)
    }

    /// A GET on the internal listener's routes.
    func getInternal(_ path: String) async -> TestResponse {
        TestResponse(await internalRouter.handle(HTTPRequest(head: HTTPRequestHead(method: "GET", path: path))))
    }

    /// A request with `json` serialised as its body and `Content-Type: application/json`.
    func send(_ method: String, _ target: String, json: Any, headers: [String: String] = [:]) async throws -> TestResponse {
        await request(
            method, target, headers: headers.merging(["Content-Type": "application/json"]) { own, _ in own },
            body: Array(try JSONSerialization.data(withJSONObject: json)))
    }

    func post(_ target: String, json: Any, headers: [String: String] = [:]) async throws -> TestResponse {
        try await send("POST", target, json: json, headers: headers)
    }

    /// Path and decoded query arguments, as the server splits them (`+` is a space; the server
    /// refuses a repeated name before routing, so tests never send one).
    static func split(_ target: String) -> (String, [String: String]) {
        guard let mark = target.firstIndex(of: "?") else { return (target, [:]) }
        var query: [String: String] = [:]
        let decode = { (s: Substring) in
            let spaced = s.replacingOccurrences(of: "+", with: " ")
            return spaced.removingPercentEncoding ?? spaced
        }
        for pair in target[target.index(after: mark)...].split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = decode(parts[0])
            if query[name] == nil { query[name] = parts.count > 1 ? decode(parts[1]) : "" }
        }
        return (String(target[..<mark]), query)
    }

    // MARK: Credentials

    /// A bearer token for `userID`, signed like the app's identity provider would (HS256).
    func userToken(_ userID: String, expiresIn: TimeInterval = 3600, extraClaims: String = "") -> String {
        let header = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8))
        let exp = Int(Date().timeIntervalSince1970 + expiresIn)
        let payload = Base64URL.encode(Array(#"{"sub":"\#(userID)","exp":\#(exp)\#(extraClaims)}"#.utf8))
        return signedToken(header: header, payload: payload)
    }

    /// `header.payload` signed with the configured secret.
    func signedToken(header: String, payload: String) -> String {
        let signature = HMACSHA256.authenticate(key: Array(userTokenSecret.utf8), message: Array("\(header).\(payload)".utf8))
        return "\(header).\(payload).\(Base64URL.encode(signature))"
    }

    func authorized(_ userID: String) -> [String: String] { ["Authorization": "Bearer \(userToken(userID))"] }

    var serviceAuthorization: [String: String] { ["Authorization": "Bearer \(serviceToken)"] }

    /// GET as `userID`, expecting a 200 JSON object.
    func read(_ target: String, as userID: String) async throws -> [String: Any] {
        let response = await get(target, headers: authorized(userID))
        guard response.status == 200 else { throw UnexpectedResponse(path: target, status: response.status, body: response.text) }
        return try response.json()
    }

    // MARK: Database

    func count(_ sql: String) async throws -> Int { try await database.count(sql) }

    /// What the ingress logged that must never be logged: signed payloads, bearer tokens, keys
    /// and the configured secrets. Empty when the logs are clean.
    func leakedSecrets() -> [String] {
        let output = logs.lines.joined(separator: "\n")
        var leaks: [String] = []
        if output.range(of: #"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"#, options: .regularExpression) != nil {
            leaks.append("a JWS")
        }
        if output.contains("Bearer ") { leaks.append("a bearer credential") }
        if output.contains("-----BEGIN") { leaks.append("a PEM key or certificate") }
        for name in ["USER_TOKEN_HS256_SECRET", "PAYLOAD_ENCRYPTION_KEYS", "CURSOR_SIGNING_KEY", "SERVICE_TOKENS"] {
            for part in (environment[name] ?? "").split(separator: ",").map({ String($0.split(separator: ":").last ?? "") })
            where part.count >= 16 && output.contains(part) {
                leaks.append(name)
            }
        }
        return leaks
    }
}

/// A call counter for injected probes.
final class Counted: Sendable {
    private let calls = Mutex(0)
    var count: Int { calls.withLock { $0 } }
    /// Counts a call and answers `value`.
    func increment(_ value: String) -> String {
        calls.withLock { $0 += 1 }
        return value
    }
}

/// A router answer as tests look at it.
struct TestResponse {
    let response: HTTPResponse

    init(_ response: HTTPResponse) { self.response = response }

    var status: Int { response.status }
    var text: String { String(decoding: response.body, as: UTF8.self) }
    func header(_ name: String) -> String? { response.header(name) }
    func json() throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any] ?? [:]
    }
    /// The `code` of an error body.
    var code: String? { (try? json())?["code"] as? String }
}

extension IngressTestApp {
    /// Rows the routes read, written straight into the database (the worker that normally writes
    /// them is not part of these tests).
    var rows: TestRows { TestRows(pool: pool, bundleID: Self.bundleID) }

    static let monthly = TestRows.monthly
    static let pro = TestRows.pro

    /// Creates an order as `user` through the route.
    func createOrder(_ user: String, product: String = monthly, requestID: String = UUID().uuidString) async throws
        -> TestResponse
    {
        try await post("/api/v1/subscriptions/orders", json: ["productId": product, "requestId": requestID], headers: authorized(user))
    }
}
