import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import Postgres
import ServiceRuntime
import TestSupport

/// A running ingress binary on a private slice of the services, trusting a test Apple signer.
struct IngressHarness {
    static let bundleID = "com.example.subscriptions"
    let pipeline: PipelineHarness
    let signer: TestAppleSigner
    let process: ServiceProcess
    let client: TestHTTPClient
    /// The internal listener (probes and metrics).
    let internalClient: TestHTTPClient
    let userTokenSecret: String
    let pool: PostgresPool
    /// The ingress's whole environment, to start more instances of it.
    let environment: [String: String]

    /// Starts the ingress and waits until it listens. `extra` overrides any variable.
    static func start(
        environment appleEnvironment: AppStoreEnvironment = .sandbox, partitions: Int = 6, extra: [String: String] = [:]
    ) async throws -> IngressHarness {
        let pipeline = try await PipelineHarness.make(partitions: partitions, appleEnvironment: appleEnvironment)
        let signer = pipeline.signer
        let secret = Base64URL.encode(SecureRandom.bytes(32))
        var environment = pipeline.serviceEnvironment
        environment.merge([
            "INGRESS_HTTP_PORT": "0",
            "INTERNAL_HTTP_PORT": "0",
            "CURSOR_SIGNING_KEY": Data(SecureRandom.bytes(32)).base64EncodedString(),
            "USER_TOKEN_HS256_SECRET": secret,
            // An upload waits for its worker up to 30 s, not the deployment's 3: the end-to-end
            // phase runs its suites side by side on two cores, and a test that expects the
            // upload's own answer to say "fulfilled" then got a 202 (seen once in a full run).
            "INGRESS_FULFILLMENT_WAIT_MS": "30000",
        ]) { _, new in new }
        environment.merge(extra) { _, new in new }
        let process = try await launch(environment)
        guard let port = process.httpPort, let internalPort = process.internalHTTPPort else {
            process.kill()
            throw MissingServiceError(variable: "the ingress port in its log")
        }
        let pool = PostgresPool(
            configuration: TestEnvironment.poolConfiguration(url: environment["DATABASE_URL"]!, maximumConnections: 4),
            logger: Logger(label: "e2e", level: .warning))
        return IngressHarness(
            pipeline: pipeline, signer: signer, process: process, client: TestHTTPClient(port: port),
            internalClient: TestHTTPClient(port: internalPort),
            userTokenSecret: secret, pool: pool, environment: environment)
    }

    /// Runs `body` with a started harness, stopped afterwards whatever happens.
    static func with<R>(
        environment appleEnvironment: AppStoreEnvironment = .sandbox, partitions: Int = 6, extra: [String: String] = [:],
        _ body: (IngressHarness) async throws -> R
    ) async throws -> R {
        let harness = try await start(environment: appleEnvironment, partitions: partitions, extra: extra)
        do {
            let result = try await body(harness)
            await harness.stop()
            return result
        } catch {
            await harness.stop()
            throw error
        }
    }

    /// Starts an ingress process with `environment` and waits until it listens.
    static func launch(_ environment: [String: String]) async throws -> ServiceProcess {
        let process = try ServiceProcess(executable: "ingress", name: "ingress", environment: environment)
        guard await process.waitForOutput("ingress listening", timeout: 60) else {
            process.kill()
            throw MissingServiceError(variable: "a listening ingress (log: \(process.output.suffix(3000)))")
        }
        return process
    }

    /// A bearer token for `userID`, signed like the app's identity provider would (HS256).
    func userToken(_ userID: String, expiresIn: TimeInterval = 3600) -> String {
        let header = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8))
        let exp = Int(Date().timeIntervalSince1970 + expiresIn)
        let payload = Base64URL.encode(Array(#"{"sub":"\#(userID)","exp":\#(exp)}"#.utf8))
        let signature = HMACSHA256.authenticate(key: Array(userTokenSecret.utf8), message: Array("\(header).\(payload)".utf8))
        return "\(header).\(payload).\(Base64URL.encode(signature))"
    }

    func count(_ sql: String) async throws -> Int {
        try await pool.query(PostgresQuery(unsafeSQL: sql)).first!.decode(0, as: Int.self)
    }

    /// What the ingress logged that must never be logged: signed payloads, bearer tokens, keys and
    /// the configured secrets. Empty when the logs are clean.
    func leakedSecrets() -> [String] {
        let output = process.output
        var leaks: [String] = []
        if output.range(of: #"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"#, options: .regularExpression) != nil {
            leaks.append("a JWS")
        }
        if output.contains("Bearer ") { leaks.append("a bearer credential") }
        if output.contains("-----BEGIN") { leaks.append("a PEM key or certificate") }
        for name in ["USER_TOKEN_HS256_SECRET", "PAYLOAD_ENCRYPTION_KEYS", "CURSOR_SIGNING_KEY"] {
            for part in (environment[name] ?? "").split(separator: ",").map({ String($0.split(separator: ":").last ?? "") })
            where part.count >= 16 && output.contains(part) {
                leaks.append(name)
            }
        }
        return leaks
    }

    func stop() async {
        process.kill()
        await pool.shutdown()
    }
}
