import Crypto
import Foundation
import ServiceRuntime

/// What `AppStoreServerAPIClient` needs: the App Store Connect API key, the app, the
/// environment and where Apple's hosts are. Read from the `APPLE_IAP_*` variables or built directly.
public struct AppStoreServerAPIConfiguration: Sendable {
    /// `APPLE_IAP_ISSUER_ID`: the issuer id of the App Store Connect API key (JWT `iss`).
    public var issuerId: String
    /// `APPLE_IAP_KEY_ID`: the key's id (JWT header `kid`).
    public var keyId: String
    /// The `.p8` key read from `APPLE_IAP_PRIVATE_KEY_PATH`.
    public var signingKey: P256PrivateKey
    /// `APPLE_IAP_BUNDLE_ID` (JWT `bid`).
    public var bundleId: String
    /// `APPLE_IAP_ENV`: Production or Sandbox (which host is called).
    public var environment: AppStoreEnvironment
    /// `APPLE_IAP_API_BASE_URL_PRODUCTION`, default https://api.storekit.apple.com.
    public var productionBaseURL: URL
    /// `APPLE_IAP_API_BASE_URL_SANDBOX`, default https://api.storekit-sandbox.apple.com.
    public var sandboxBaseURL: URL
    public var timeouts: AppStoreAPITimeouts
    public var retryPolicy: AppStoreAPIRetryPolicy

    public static let defaultProductionBaseURL = URL(string: "https://api.storekit.apple.com")!
    public static let defaultSandboxBaseURL = URL(string: "https://api.storekit-sandbox.apple.com")!

    public init(
        issuerId: String, keyId: String, signingKey: P256PrivateKey, bundleId: String, environment: AppStoreEnvironment,
        productionBaseURL: URL = defaultProductionBaseURL, sandboxBaseURL: URL = defaultSandboxBaseURL,
        timeouts: AppStoreAPITimeouts = AppStoreAPITimeouts(), retryPolicy: AppStoreAPIRetryPolicy = AppStoreAPIRetryPolicy()
    ) {
        self.issuerId = issuerId
        self.keyId = keyId
        self.signingKey = signingKey
        self.bundleId = bundleId
        self.environment = environment
        self.productionBaseURL = productionBaseURL
        self.sandboxBaseURL = sandboxBaseURL
        self.timeouts = timeouts
        self.retryPolicy = retryPolicy
    }

    /// Reads and validates the `APPLE_IAP_*` variables, reporting every problem at once.
    public init(environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigurationError) {
        let reader = ConfigurationReader(environment: environment)
        let configuration = Self.read(from: reader)
        try reader.validate()
        self = configuration!
    }

    /// Reads the variables into `reader` (so a service collects these problems with its
    /// others); nil exactly when a problem was reported.
    public static func read(from reader: ConfigurationReader) -> AppStoreServerAPIConfiguration? {
        let before = reader.problems.count
        let issuerId = reader.requiredString("APPLE_IAP_ISSUER_ID", expected: "the issuer id of the App Store Connect API key")
        let keyId = reader.requiredString("APPLE_IAP_KEY_ID", expected: "the id of the App Store Connect API key")
        let bundleId = reader.requiredString("APPLE_IAP_BUNDLE_ID", expected: "the app's bundle identifier")
        let environmentName = reader.requiredString("APPLE_IAP_ENV", expected: "Production or Sandbox")
        let environment = [AppStoreEnvironment.production, .sandbox].first { $0.rawValue.lowercased() == environmentName.lowercased() }
        if environment == nil && !environmentName.isEmpty {
            reader.report("APPLE_IAP_ENV", environmentName, "Production or Sandbox for the App Store Server API")
        }
        var signingKey: P256PrivateKey?
        let keyPath = reader.requiredString("APPLE_IAP_PRIVATE_KEY_PATH", expected: "the path of the .p8 key file")
        if !keyPath.isEmpty {
            if let data = FileManager.default.contents(atPath: keyPath) {
                do throws(CryptoError) { signingKey = try P256PrivateKey(pem: String(decoding: data, as: UTF8.self)) } catch {
                    reader.report("APPLE_IAP_PRIVATE_KEY_PATH", keyPath, "an unencrypted P-256 .p8 key (\(error.reason))")
                }
            } else {
                reader.report("APPLE_IAP_PRIVATE_KEY_PATH", keyPath, "a readable .p8 key file")
            }
        }
        let production = url(reader, "APPLE_IAP_API_BASE_URL_PRODUCTION", default: defaultProductionBaseURL)
        let sandbox = url(reader, "APPLE_IAP_API_BASE_URL_SANDBOX", default: defaultSandboxBaseURL)
        guard reader.problems.count == before, let environment, let signingKey else { return nil }
        return AppStoreServerAPIConfiguration(
            issuerId: issuerId, keyId: keyId, signingKey: signingKey, bundleId: bundleId, environment: environment,
            productionBaseURL: production, sandboxBaseURL: sandbox)
    }

    private static func url(_ reader: ConfigurationReader, _ name: String, default fallback: URL) -> URL {
        guard let raw = reader.optionalString(name) else { return fallback }
        guard let url = URL(string: raw), let scheme = url.scheme?.lowercased(), scheme == "https" || scheme == "http",
            url.host?.isEmpty == false, url.query == nil
        else {
            reader.report(name, raw, "an http(s) base URL without query")
            return fallback
        }
        return url
    }

    /// The host serving `environment`.
    public func baseURL(for environment: AppStoreEnvironment) -> URL {
        environment == .production ? productionBaseURL : sandboxBaseURL
    }
}

/// Time limits of one API call. URLSession has no separate connect phase knob, so `connect`
/// bounds the wait for the first response byte together with `read` (connect + read), `read`
/// bounds every silence while a response streams in, and `total` bounds the whole call,
/// retries and back-off included.
public struct AppStoreAPITimeouts: Sendable, Hashable {
    public var connect: Duration
    public var read: Duration
    public var total: Duration

    public init(connect: Duration = .seconds(5), read: Duration = .seconds(15), total: Duration = .seconds(45)) {
        self.connect = connect
        self.read = read
        self.total = total
    }
}

/// How often and how patiently a call is retried: exponential back-off with full jitter
/// (a random delay in 0...min(maxDelay, baseDelay·2^(n-1)) before retry n), or the server's
/// Retry-After when it sends one.
public struct AppStoreAPIRetryPolicy: Sendable, Hashable {
    /// Requests per call, the first included (a 401 re-sign is not counted).
    public var maxAttempts: Int
    public var baseDelay: Duration
    public var maxDelay: Duration

    public init(maxAttempts: Int = 4, baseDelay: Duration = .milliseconds(250), maxDelay: Duration = .seconds(8)) {
        self.maxAttempts = max(1, maxAttempts)
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
    }

    /// The jittered delay before retry number `retry` (1 = the first retry).
    func backoff(retry: Int) -> Duration {
        let cap = min(Self.seconds(maxDelay), Self.seconds(baseDelay) * pow(2, Double(min(retry - 1, 30))))
        return .seconds(Double.random(in: 0...max(0, cap)))
    }

    static func seconds(_ duration: Duration) -> Double {
        duration.inSeconds
    }
}
