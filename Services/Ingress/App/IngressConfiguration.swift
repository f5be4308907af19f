import AppStore
import Credits
import Crypto
import Domain
import Foundation
import HTTPServer
import Pipeline
import Postgres
import ServiceRuntime
import Webhooks

/// Everything the ingress reads from its environment, validated at start-up.
public struct IngressConfiguration: Sendable {
    public var pipeline: PipelineConfiguration
    /// `DATABASE_READ_URL`: libpq URI of a replica the REST list endpoints read from (a pool of
    /// `DATABASE_MAX_CONNECTIONS` of its own); nil (unset) reads them from `DATABASE_URL`.
    public var readDatabaseURL: String?
    /// `APPLE_IAP_*`: who may sign the data we accept.
    public var appStore: AppStoreVerifierConfiguration
    /// `PAYLOAD_ENCRYPTION_KEYS`: seals signed payloads at rest. Required.
    public var payloadCipher: PayloadCipher?
    /// Listening port (`INGRESS_HTTP_PORT`). Default 8080.
    public var httpPort: Int
    /// Listening address (`INGRESS_HTTP_HOST`). Default 0.0.0.0.
    public var httpHost: String
    /// The internal listener of `/metrics`, `/healthz` and `/readyz` (`INTERNAL_HTTP_HOST`, default
    /// 0.0.0.0; `INTERNAL_HTTP_PORT`, default 8083, 0 picks a free port): never exposed publicly.
    public var internalHTTPHost: String
    public var internalHTTPPort: Int
    /// HTTP worker threads (`INGRESS_HTTP_THREADS`). Default 4.
    public var httpThreads: Int
    /// Largest accepted request body (`INGRESS_MAX_BODY_BYTES`). Default 256 KiB.
    public var maxBodyBytes: Int
    /// How long a transaction upload waits for its fulfillment (`INGRESS_FULFILLMENT_WAIT_MS`). Default 3000.
    public var fulfillmentWait: Duration
    /// Apple endpoints: sustained requests per second per source address
    /// (`INGRESS_NOTIFICATION_RATE_PER_SECOND`, default 1000) and burst (`INGRESS_NOTIFICATION_RATE_BURST`, default 2000).
    /// Well above what Apple sends one instance at peak renewal hours: a 429 makes Apple retry
    /// only after an hour, and behind a load balancer every notification shares one source address.
    public var notificationRatePerSecond: Int
    public var notificationRateBurst: Int
    /// Apple endpoints, requests that fail verification: a budget of their own per source
    /// (`INGRESS_UNVERIFIED_RATE_PER_SECOND`, default 50; `INGRESS_UNVERIFIED_RATE_BURST`, default
    /// 100), so junk from a source Apple shares never spends Apple's budget (429 beyond it).
    public var unverifiedRatePerSecond: Int
    public var unverifiedRateBurst: Int
    /// `INGRESS_TRUSTED_PROXIES`: CIDRs of the load balancers in front (default none). The source
    /// of a request they relay is the client they name in `X-Forwarded-For`, and their
    /// connections are not capped per address.
    public var trustedProxies: [AddressRange]
    /// Open connections per source address (`INGRESS_MAX_CONNECTIONS_PER_IP`, default 64).
    public var maxConnectionsPerIP: Int
    /// A request head must arrive within this (`INGRESS_REQUEST_HEADER_TIMEOUT_MS`, default 10000).
    public var requestHeaderTimeout: Duration
    /// How long a CREATED purchase order blocks another purchase in its subscription group; an
    /// older one is EXPIRED when the user starts a new purchase (`INGRESS_OPEN_ORDER_MINUTES`, 0: at
    /// once). Default 15. A PENDING one (Ask to Buy) blocks until it completes or expires.
    public var openOrderWindow: TimeInterval
    /// `CURSOR_SIGNING_KEY`: HMAC key of the opaque page cursors (at least 32 bytes). Required.
    public var cursorSigningKey: [UInt8]
    /// `USER_TOKEN_*`: how client bearer tokens are verified (JWK Set, public key or HS256 secrets).
    public var userTokens: UserTokenSettings
    /// `SERVICE_TOKENS`: the back-end services allowed to use the metering API.
    public var serviceTokens: ServiceTokenSettings
    /// `ADMIN_HTTP_HOST`, `ADMIN_HTTP_PORT`, `ADMIN_TOKENS`: the admin listener, off without tokens.
    public var admin: AdminSettings
    /// `CREDITS_MAX_BALANCE`, `CREDITS_MAX_ADJUSTMENT`: what an operator's adjustment may not pass.
    public var creditLimits: CreditLimits
    /// `ENTITLEMENT_SIGNING_KEY_PATH`: an unencrypted EC P-256 PEM key that signs entitlement
    /// answers asked with `X-Nonce`; unset, answers are not signed.
    public var entitlementSigningKey: P256PrivateKey?
    /// `WEBHOOK_*`: what a registered URL may be, and how long a rotated-out secret still signs.
    public var webhooks: WebhookConfiguration
    /// `APPLE_IAP_ISSUER_ID`, `APPLE_IAP_KEY_ID`, `APPLE_IAP_PRIVATE_KEY_PATH` (with
    /// `APPLE_IAP_BUNDLE_ID`, `APPLE_IAP_ENV`), as the workers': the App Store key that signs offer
    /// signatures and calls the App Store Server API for the admin API's Apple actions; unset,
    /// those answer 503 (`OFFER_SIGNING_UNAVAILABLE`, `APPLE_API_NOT_CONFIGURED`).
    public var appStoreAPI: AppStoreServerAPIConfiguration?
    /// `OFFER_SIGNATURE_RATE_PER_MINUTE` (default 10) and `OFFER_SIGNATURE_RATE_BURST` (default 5):
    /// each user's budget of offer signatures, so one account cannot mint them in bulk.
    public var offerSignatureRatePerMinute: Int
    public var offerSignatureRateBurst: Int
    /// `RETENTION_MESSAGING_ENABLED` (default false): whether Apple's Get Retention Message
    /// endpoint answers from the catalogue's rules; off, it answers 404 and Apple shows its default.
    public var retentionMessagingEnabled: Bool

    public init(reader: ConfigurationReader) {
        pipeline = PipelineConfiguration(reader: reader)
        readDatabaseURL = reader.optionalString("DATABASE_READ_URL")
        if let url = readDatabaseURL, !(url.hasPrefix("postgresql://") || url.hasPrefix("postgres://")) {
            reader.report("DATABASE_READ_URL", url, "a libpq URI, postgresql://user:pass@host:port/db")
        }
        appStore = AppStoreVerifierConfiguration.read(from: reader)
        payloadCipher = PayloadCipher(reader: reader)
        httpPort = reader.int("INGRESS_HTTP_PORT", default: 8080, range: 0...65_535)
        httpHost = reader.string("INGRESS_HTTP_HOST", default: "0.0.0.0")
        internalHTTPHost = reader.string("INTERNAL_HTTP_HOST", default: "0.0.0.0")
        internalHTTPPort = reader.int("INTERNAL_HTTP_PORT", default: 8083, range: 0...65_535)
        httpThreads = reader.int("INGRESS_HTTP_THREADS", default: 4, range: 1...256)
        maxBodyBytes = reader.int("INGRESS_MAX_BODY_BYTES", default: 256 * 1024, range: 1024...64 * 1024 * 1024)
        fulfillmentWait = .milliseconds(reader.int("INGRESS_FULFILLMENT_WAIT_MS", default: 3000, range: 0...60_000))
        notificationRatePerSecond = reader.int("INGRESS_NOTIFICATION_RATE_PER_SECOND", default: 1000, range: 1...1_000_000)
        notificationRateBurst = reader.int("INGRESS_NOTIFICATION_RATE_BURST", default: 2000, range: 1...1_000_000)
        unverifiedRatePerSecond = reader.int("INGRESS_UNVERIFIED_RATE_PER_SECOND", default: 50, range: 1...1_000_000)
        unverifiedRateBurst = reader.int("INGRESS_UNVERIFIED_RATE_BURST", default: 100, range: 1...1_000_000)
        trustedProxies = Self.addressRanges(reader, "INGRESS_TRUSTED_PROXIES")
        maxConnectionsPerIP = reader.int("INGRESS_MAX_CONNECTIONS_PER_IP", default: 64, range: 1...1_000_000)
        requestHeaderTimeout = .milliseconds(
            reader.int("INGRESS_REQUEST_HEADER_TIMEOUT_MS", default: 10_000, range: 100...600_000))
        openOrderWindow = TimeInterval(60 * reader.int("INGRESS_OPEN_ORDER_MINUTES", default: 15, range: 0...(60 * 24 * 7)))
        cursorSigningKey = Self.secretBytes(reader, "CURSOR_SIGNING_KEY")
        userTokens = UserTokenSettings(reader: reader)
        serviceTokens = ServiceTokenSettings(reader: reader)
        admin = AdminSettings(reader: reader)
        creditLimits = CreditLimits(reader: reader)
        entitlementSigningKey = Self.signingKey(reader, "ENTITLEMENT_SIGNING_KEY_PATH")
        webhooks = WebhookConfiguration(reader: reader)
        let keySettings = ["APPLE_IAP_ISSUER_ID", "APPLE_IAP_KEY_ID", "APPLE_IAP_PRIVATE_KEY_PATH"]
        appStoreAPI = keySettings.contains { reader.raw($0) != nil } ? AppStoreServerAPIConfiguration.read(from: reader) : nil
        offerSignatureRatePerMinute = reader.int("OFFER_SIGNATURE_RATE_PER_MINUTE", default: 10, range: 1...600_000)
        offerSignatureRateBurst = reader.int("OFFER_SIGNATURE_RATE_BURST", default: 5, range: 1...10_000)
        retentionMessagingEnabled = reader.bool("RETENTION_MESSAGING_ENABLED", default: false)
        if admin.isEnabled && admin.port != 0 && (admin.port == httpPort || admin.port == internalHTTPPort) {
            reader.report(
                "ADMIN_HTTP_PORT", String(admin.port), "a port other than INGRESS_HTTP_PORT and INTERNAL_HTTP_PORT (a listener of its own)")
        }
    }

    /// The replica's pool settings, when `DATABASE_READ_URL` is set.
    public var readPostgres: PostgresConfiguration? {
        readDatabaseURL.map { PostgresConfiguration(url: $0, maximumConnections: pipeline.databaseMaxConnections) }
    }

    /// A secret given as base64 (or as raw text of at least 32 bytes).
    static func secretBytes(_ reader: ConfigurationReader, _ name: String) -> [UInt8] {
        let expected = "a secret of at least 32 bytes (base64, e.g. `openssl rand -base64 32`)"
        guard let raw = reader.raw(name) else {
            reader.report(name, nil, expected)
            return []
        }
        let bytes = Data(base64Encoded: raw).map(Array.init) ?? Array(raw.utf8)
        if bytes.count < 32 { reader.report(name, raw, expected) }
        return bytes
    }

    /// An optional P-256 private key file; a path that is set must hold one.
    static func signingKey(_ reader: ConfigurationReader, _ name: String) -> P256PrivateKey? {
        guard let path = reader.optionalString(name) else { return nil }
        guard let data = FileManager.default.contents(atPath: path) else {
            reader.report(name, path, "a readable PEM file of an EC P-256 private key")
            return nil
        }
        do throws(CryptoError) {
            return try P256PrivateKey(pem: String(decoding: data, as: UTF8.self))
        } catch {
            reader.report(name, path, "an unencrypted EC P-256 private key in PEM (\(error.reason))")
            return nil
        }
    }

    /// Comma-separated CIDRs (blanks around them allowed); unset or empty is none.
    static func addressRanges(_ reader: ConfigurationReader, _ name: String) -> [AddressRange] {
        guard let raw = reader.raw(name) else { return [] }
        let parts = raw.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        let ranges = parts.compactMap(AddressRange.init(cidr:))
        if ranges.count != parts.count {
            reader.report(name, raw, "comma-separated IPv4 or IPv6 networks in CIDR notation (10.0.0.0/8, 2001:db8::/32)")
        }
        return ranges
    }

    /// Reads and validates; throws one error listing every problem.
    public static func load(environment: [String: String]) throws(ConfigurationError) -> IngressConfiguration {
        let reader = ConfigurationReader(environment: environment)
        let configuration = IngressConfiguration(reader: reader)
        try reader.validate()
        return configuration
    }
}

/// How client bearer tokens (JWTs whose `sub` is the user id) are verified: exactly one family of
/// keys (HS256 secrets, one public key file, or the identity provider's JWK Set) and the claims
/// every token must carry.
public struct UserTokenSettings: Sendable {
    /// One HS256 secret and the `kid` that selects it.
    public struct Secret: Sendable {
        /// nil: `USER_TOKEN_HS256_SECRET`, which no `kid` names (tried for tokens without one).
        public var kid: String?
        public var bytes: [UInt8]

        public init(kid: String?, bytes: [UInt8]) {
            self.kid = kid
            self.bytes = bytes
        }
    }

    /// `USER_TOKEN_HS256_SECRET` (no kid) and `USER_TOKEN_HS256_SECRETS` (`kid:secret,…`), each
    /// at least 32 bytes, used as their UTF-8 text. Both may be set: together they are one family.
    public var hs256Secrets: [Secret]
    /// The PEM read from `USER_TOKEN_PUBLIC_KEY_PATH` (EC P-256, RSA or Ed25519).
    public var publicKeyPEM: String?
    /// `USER_TOKEN_JWKS_URL`: the identity provider's JWK Set, https (http only to a loopback
    /// address, for tests and local runs).
    public var jwksURL: URL?
    /// `USER_TOKEN_JWKS_MIN_REFRESH_SECONDS`: the JWK Set is fetched at most once per this long,
    /// whatever unknown `kid`s arrive. Default: 30.
    public var jwksMinimumRefreshInterval: TimeInterval
    /// `USER_TOKEN_ISSUER`: when set, `iss` must equal it.
    public var issuer: String?
    /// `USER_TOKEN_AUDIENCE`: when set, `aud` (a string or an array) must contain it.
    public var audience: String?

    public init(
        hs256Secret: [UInt8]? = nil, hs256Secrets: [Secret] = [], publicKeyPEM: String? = nil, jwksURL: URL? = nil,
        jwksMinimumRefreshInterval: TimeInterval = 30, issuer: String? = nil, audience: String? = nil
    ) {
        self.hs256Secrets = hs256Secret.map { [Secret(kid: nil, bytes: $0)] + hs256Secrets } ?? hs256Secrets
        self.publicKeyPEM = publicKeyPEM
        self.jwksURL = jwksURL
        self.jwksMinimumRefreshInterval = jwksMinimumRefreshInterval
        self.issuer = issuer
        self.audience = audience
    }

    init(reader: ConfigurationReader) {
        self.init()
        let method = "one verification method: USER_TOKEN_JWKS_URL, USER_TOKEN_PUBLIC_KEY_PATH or the HS256 secrets"
        readSecrets(reader)
        if let path = reader.raw("USER_TOKEN_PUBLIC_KEY_PATH") {
            if let pem = try? String(contentsOfFile: path, encoding: .utf8) {
                publicKeyPEM = pem
            } else {
                reader.report("USER_TOKEN_PUBLIC_KEY_PATH", path, "a readable PEM file with an EC P-256, RSA or Ed25519 public key")
            }
        }
        if let raw = reader.raw("USER_TOKEN_JWKS_URL") {
            if let url = URL(string: raw), Self.isAcceptableJWKSURL(url) {
                jwksURL = url
            } else {
                reader.report("USER_TOKEN_JWKS_URL", raw, "an https URL of a JWK Set (http only to 127.0.0.1, ::1 or localhost)")
            }
        }
        jwksMinimumRefreshInterval = TimeInterval(reader.int("USER_TOKEN_JWKS_MIN_REFRESH_SECONDS", default: 30, range: 1...86_400))
        issuer = reader.raw("USER_TOKEN_ISSUER")
        audience = reader.raw("USER_TOKEN_AUDIENCE")
        // Keys of two families side by side would let a token choose which check it faces.
        let configured = [
            ("USER_TOKEN_HS256_SECRET", reader.raw("USER_TOKEN_HS256_SECRET") ?? reader.raw("USER_TOKEN_HS256_SECRETS")),
            ("USER_TOKEN_PUBLIC_KEY_PATH", reader.raw("USER_TOKEN_PUBLIC_KEY_PATH")),
            ("USER_TOKEN_JWKS_URL", reader.raw("USER_TOKEN_JWKS_URL")),
        ].filter { $0.1 != nil }
        if configured.isEmpty {
            reader.report("USER_TOKEN_JWKS_URL", nil, method)
        } else if configured.count > 1 {
            for (name, value) in configured.dropFirst() { reader.report(name, value, "unset: \(method), not several") }
        }
    }

    private mutating func readSecrets(_ reader: ConfigurationReader) {
        let expected = "a secret of at least 32 bytes"
        if let secret = reader.raw("USER_TOKEN_HS256_SECRET") {
            if secret.utf8.count < 32 { reader.report("USER_TOKEN_HS256_SECRET", secret, expected) }
            hs256Secrets.append(Secret(kid: nil, bytes: Array(secret.utf8)))
        }
        let listExpected = "kid:secret,… with unique kids and secrets of at least 32 bytes without ','"
        guard let pairs = reader.pairs("USER_TOKEN_HS256_SECRETS", expected: listExpected) else { return }
        let kids = pairs.map(\.0)
        if Set(kids).count != kids.count || pairs.contains(where: { $0.1.utf8.count < 32 }) {
            reader.report("USER_TOKEN_HS256_SECRETS", reader.raw("USER_TOKEN_HS256_SECRETS"), listExpected)
        }
        hs256Secrets += pairs.map { Secret(kid: $0.0, bytes: Array($0.1.utf8)) }
    }

    /// https anywhere; plain http only to this machine, where nobody on the path can swap the keys.
    static func isAcceptableJWKSURL(_ url: URL) -> Bool {
        guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased(), !host.isEmpty else { return false }
        return scheme == "https" || (scheme == "http" && ["127.0.0.1", "::1", "[::1]", "localhost"].contains(host))
    }
}
