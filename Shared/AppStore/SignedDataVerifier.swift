import Crypto
import Foundation
import ServiceRuntime
import Synchronization

/// Verifies and decodes data the App Store signs (notifications, transactions, renewal infos,
/// app transactions) the way Apple's App Store Server Library does, but stricter:
///
/// 1. compact JWS, at most 256 KiB, `alg` ES256 only, no `crit`;
/// 2. `x5c` holds exactly leaf, intermediate and root; the leaf carries OID
///    1.2.840.113635.100.6.11.1, the intermediate 1.2.840.113635.100.6.2.1; the chain is built
///    from the leaf and intermediate to a *configured* root only, and `x5c[2]` must be that root;
/// 3. certificates are checked at the payload's signedDate (the current time when it has none,
///    as Apple's library does); with online checks, at the current time and against each
///    certificate's OCSP responder (see `RevocationChecker`);
/// 4. the ES256 signature over `header.payload` verifies with the leaf key;
/// 5. bundleId, appAppleId (Production) and environment match.
///
/// Verified chains are cached by (leaf, intermediate) fingerprint, so a repeat costs one ECDSA
/// verification. Calls are CPU work (~0.1 ms) that only suspends for OCSP requests (online
/// checks, when no fresh answer is cached), and safe from any task.
///
/// Sendable: configuration and chain verifier are immutable; the cache sits behind a Mutex.
public final class SignedDataVerifier: Sendable {
    public let configuration: AppStoreVerifierConfiguration
    private let chainVerifier: X509ChainVerifier
    private let clock: any WallClock
    private let cache = Mutex(ChainCache())
    private let metrics: VerifierMetrics
    private let revocation: RevocationChecker?

    static let leafOID = "1.2.840.113635.100.6.11.1"
    static let intermediateOID = "1.2.840.113635.100.6.2.1"

    /// Refuses an invalid configuration; logs a loud warning for every non-Apple root.
    /// `clock` gives "now" (for data without signedDate, online checks and OCSP freshness);
    /// `metrics` receives the outcome counters; `onlineCheckTimeout` bounds each OCSP request.
    public init(
        configuration: AppStoreVerifierConfiguration, clock: any WallClock = SystemClock(),
        logger: Logger = Logger(label: "appstore.verifier"), metrics: MetricsRegistry = .shared,
        onlineCheckTimeout: Duration = .seconds(5)
    ) throws(ConfigurationError) {
        chainVerifier = try configuration.trustedChainVerifier()
        self.configuration = configuration
        self.clock = clock
        self.metrics = VerifierMetrics(registry: metrics)
        revocation =
            configuration.onlineChecks
            ? RevocationChecker(trust: chainVerifier, timeout: onlineCheckTimeout, clock: clock, logger: logger) : nil
        for root in configuration.testRoots {
            logger.warning(
                "TEST ROOT CERTIFICATE TRUSTED: data signed by a non-Apple chain will verify; never use this in production",
                [
                    "appstore.root_subject": .string(root.subject),
                    "appstore.root_sha256": .string(Hex.encode(root.sha256Fingerprint)),
                ])
        }
    }

    /// A notification (the `signedPayload` of the request body). Nested transaction and renewal
    /// infos stay signed: verify them with `verifyTransaction` / `verifyRenewalInfo` on request.
    /// `expectedEnvironment` defaults to the configured one (pass `.sandbox` on a Production
    /// deployment's sandbox endpoint).
    public func verifyNotification(_ signedPayload: String, expectedEnvironment: AppStoreEnvironment? = nil)
        async throws(VerificationError) -> ResponseBodyV2DecodedPayload
    {
        try await verify(signedPayload, expectedEnvironment) { (payload: ResponseBodyV2DecodedPayload) in
            if let data = payload.data {
                return Claims(
                    signedDate: payload.signedDate, environment: data.rawEnvironment,
                    bundleId: data.bundleId, appAppleId: data.appAppleId, checksApp: true)
            }
            if let summary = payload.summary {
                return Claims(
                    signedDate: payload.signedDate, environment: summary.rawEnvironment,
                    bundleId: summary.bundleId, appAppleId: summary.appAppleId, checksApp: true)
            }
            if let token = payload.externalPurchaseToken {
                return Claims(
                    signedDate: payload.signedDate, environment: token.environment.rawValue,
                    bundleId: token.bundleId, appAppleId: token.appAppleId, checksApp: true)
            }
            if let app = payload.appData {
                return Claims(
                    signedDate: payload.signedDate, environment: app.rawEnvironment,
                    bundleId: app.bundleId, appAppleId: app.appAppleId, checksApp: true)
            }
            return Claims(signedDate: payload.signedDate, environment: nil, bundleId: nil, appAppleId: nil, checksApp: true)
        }
    }

    /// A signed transaction (JWSTransaction): bundleId and environment are checked.
    public func verifyTransaction(_ signedTransaction: String, expectedEnvironment: AppStoreEnvironment? = nil)
        async throws(VerificationError) -> JWSTransactionDecodedPayload
    {
        try await verify(signedTransaction, expectedEnvironment) { (payload: JWSTransactionDecodedPayload) in
            Claims(
                signedDate: payload.signedDate, environment: payload.rawEnvironment,
                bundleId: payload.bundleId, appAppleId: nil, checksApp: true, checksAppAppleId: false)
        }
    }

    /// Signed renewal info (JWSRenewalInfo): it names no app, so only the environment is checked.
    public func verifyRenewalInfo(_ signedRenewalInfo: String, expectedEnvironment: AppStoreEnvironment? = nil)
        async throws(VerificationError) -> JWSRenewalInfoDecodedPayload
    {
        try await verify(signedRenewalInfo, expectedEnvironment) { (payload: JWSRenewalInfoDecodedPayload) in
            Claims(
                signedDate: payload.signedDate, environment: payload.rawEnvironment,
                bundleId: nil, appAppleId: nil, checksApp: false)
        }
    }

    /// A signed app transaction: checked at its receiptCreationDate; bundleId, appAppleId
    /// (Production) and receiptType are checked.
    public func verifyAppTransaction(_ signedAppTransaction: String, expectedEnvironment: AppStoreEnvironment? = nil)
        async throws(VerificationError) -> AppTransaction
    {
        try await verify(signedAppTransaction, expectedEnvironment) { (payload: AppTransaction) in
            Claims(
                signedDate: payload.receiptCreationDate, environment: payload.rawReceiptType,
                bundleId: payload.bundleId, appAppleId: payload.appAppleId, checksApp: true)
        }
    }

    /// A Get Retention Message request (Retention Messaging API). It names no bundle, only the
    /// app's appAppleId, which Apple says to always check: it must be the configured one whenever
    /// one is configured, and in Production always.
    public func verifyRealtimeRequest(_ signedPayload: String, expectedEnvironment: AppStoreEnvironment? = nil)
        async throws(VerificationError) -> DecodedRealtimeRequestBody
    {
        try await verify(signedPayload, expectedEnvironment) { (payload: DecodedRealtimeRequestBody) in
            Claims(
                signedDate: payload.signedDate, environment: payload.rawEnvironment,
                bundleId: nil, appAppleId: payload.appAppleId, checksApp: true, checksBundleId: false)
        }
    }

    /// What a payload says about itself that verification depends on.
    private struct Claims {
        var signedDate: Date?
        var environment: String?
        var bundleId: String?
        var appAppleId: Int64?
        var checksApp: Bool
        var checksAppAppleId = true
        /// False for a payload that names its app by appAppleId only; that id is then required
        /// whenever it is configured.
        var checksBundleId = true
    }

    /// Where one synchronous pass over a token ended.
    private enum Step<Payload> {
        case verified(Payload)
        /// Online checks need OCSP answers for this verified chain before the pass can finish.
        case needsRevocationCheck(ChainCache.Key, [X509Certificate])
    }

    private func verify<Payload: Decodable>(
        _ token: String, _ requestedEnvironment: AppStoreEnvironment?, claims: (Payload) -> Claims
    ) async throws(VerificationError) -> Payload {
        do {
            let payload = try await verifyUnmetered(token, requestedEnvironment, claims: claims)
            metrics.record(nil)
            return payload
        } catch {
            metrics.record(error.code)
            throw error
        }
    }

    private func verifyUnmetered<Payload: Decodable>(
        _ token: String, _ requestedEnvironment: AppStoreEnvironment?, claims claimsOf: (Payload) -> Claims
    ) async throws(VerificationError) -> Payload {
        let expected = try acceptedEnvironment(requestedEnvironment)
        var checked: ChainCache.Key?
        // At most two passes: the second runs once the chain's OCSP answers are in.
        for _ in 0..<2 {
            let step = try CompactJWS.withSegments(of: token) { jws throws(VerificationError) in
                try verify(jws, expected: expected, revocationChecked: checked, claims: claimsOf)
            }
            switch step {
            case .verified(let payload): return payload
            case .needsRevocationCheck(let key, let chain):
                try await revocation?.check(chain: chain)
                checked = key
            }
        }
        throw VerificationError(.retryableVerification, "the revocation status of the chain changed during verification")
    }

    private func verify<Payload: Decodable>(
        _ jws: CompactJWS, expected: AppStoreEnvironment, revocationChecked: ChainCache.Key?,
        claims claimsOf: (Payload) -> Claims
    ) throws(VerificationError) -> Step<Payload> {
        // A header seen in an earlier successful verification is not decoded again: its
        // algorithm checks passed and its certificates are at hand (found by its exact bytes).
        let known = cache.withLock { $0.signingHeader(for: jws.header) }
        let knownHeader = known?.header
        var x5c: [String]?
        if knownHeader == nil {
            let header = try JWSHeader.decode(jws.header)
            guard header.alg == JWSAlgorithm.es256.rawValue else {
                throw VerificationError(.invalidSignature, "algorithm \(header.alg.map { "'\($0)'" } ?? "missing") is not ES256")
            }
            guard header.crit == nil else {
                throw VerificationError(.invalidSignature, "critical header parameters are not supported")
            }
            x5c = header.x5c
        }
        let payloadBytes = try CompactJWS.decode(jws.payload, "payload")
        let payload: Payload
        do {
            payload = try AppStoreJSON.decode(Payload.self, from: payloadBytes)
        } catch {
            throw VerificationError(.malformed, "the payload is not a JSON \(Payload.self)")
        }
        let claims = claimsOf(payload)

        if let environment = claims.environment.flatMap(AppStoreEnvironment.init(rawValue:)), environment.isLocal {
            // Locally signed data has no Apple chain to check (Apple's library skips it too);
            // only a configuration that allows it for local testing may accept it.
            guard configuration.allowXcode, environment == expected else {
                throw VerificationError(
                    .invalidEnvironment,
                    "\(environment.rawValue)-signed data is refused (APPLE_IAP_ALLOW_XCODE is \(configuration.allowXcode), expected \(expected.rawValue))"
                )
            }
        } else {
            let now = clock.now()
            let date = configuration.onlineChecks ? now : (claims.signedDate ?? now)
            let header: SigningHeader
            if let knownHeader { header = knownHeader } else { header = try SigningHeader(x5c: x5c) }
            let entry = try verifiedChain(header, at: date, now: now)
            if let revocation, revocationChecked != header.chainKey,
                !(revocation.isKnownGood(header.chainKey.leaf, now: now) && revocation.isKnownGood(header.chainKey.intermediate, now: now))
            {
                return .needsRevocationCheck(header.chainKey, entry.chain)
            }
            if knownHeader == nil { cache.withLock { $0.remember(header, for: jws.header, signingInput: jws.signingInput) } }
            let signature = try CompactJWS.decode(jws.signature, "signature")
            guard signature.count == 64 else {
                throw VerificationError(.invalidSignature, "an ES256 signature is 64 bytes (r||s), got \(signature.count)")
            }
            // A known header's bytes (and the dot after them) are already absorbed: only the
            // payload is hashed, about two thirds of a notification's signing input.
            let digest =
                known.map { $0.signingPrefix.hash(appending: UnsafeRawBufferPointer(jws.payload)) }
                ?? SHA256.hash(UnsafeRawBufferPointer(jws.signingInput))
            guard entry.leafKey.isValidSignature(signature, digest: digest) else {
                throw VerificationError(.invalidSignature, "the signature does not verify with the leaf certificate's key")
            }
        }

        if claims.checksApp && !claims.checksBundleId, let configured = configuration.appAppleId, claims.appAppleId != configured {
            throw VerificationError(.invalidApp, "appAppleId \(claims.appAppleId.map(String.init) ?? "missing") is not the configured one")
        }
        if claims.checksApp {
            guard !claims.checksBundleId || claims.bundleId == configuration.bundleId else {
                throw VerificationError(.invalidApp, "bundleId \(claims.bundleId.map { "'\($0)'" } ?? "missing") is not the configured one")
            }
            if claims.checksAppAppleId && claims.environment == AppStoreEnvironment.production.rawValue
                && claims.appAppleId != configuration.appAppleId
            {
                throw VerificationError(.invalidApp, "appAppleId \(claims.appAppleId.map(String.init) ?? "missing") is not the configured one")
            }
        }
        guard claims.environment == expected.rawValue else {
            throw VerificationError(
                .invalidEnvironment, "environment \(claims.environment.map { "'\($0)'" } ?? "missing") is not the expected \(expected.rawValue)")
        }
        return .verified(payload)
    }

    /// The environment the caller may ask for on this deployment: Production serves both App
    /// Store environments; anything else serves Sandbox (plus local data when allowed).
    private func acceptedEnvironment(_ requested: AppStoreEnvironment?) throws(VerificationError) -> AppStoreEnvironment {
        let expected = requested ?? configuration.environment
        let accepted: Bool =
            switch configuration.environment {
            case .production: expected == .production || expected == .sandbox
            case .sandbox, .xcode, .localTesting: expected == .sandbox || (expected.isLocal && configuration.allowXcode)
            }
        guard accepted else {
            throw VerificationError(
                .invalidEnvironment, "a \(configuration.environment.rawValue) deployment does not accept \(expected.rawValue) data")
        }
        return expected
    }

    /// The chain verified at `date`, from the cache when this (leaf, intermediate) pair was
    /// verified before and `date` lies inside the chain's validity.
    private func verifiedChain(_ header: SigningHeader, at date: Date, now: Date) throws(VerificationError) -> ChainCache.Entry {
        let entry: ChainCache.Entry
        if let cached = cache.withLock({ $0.lookup(header.chainKey, now: now) }) {
            // Only validity depends on the date: outside it, OpenSSL would refuse this very chain.
            guard cached.validFrom <= date, date <= cached.validUntil else {
                throw VerificationError(
                    .invalidChain,
                    "certificate chain is not valid at \(date) (valid from \(cached.validFrom) until \(cached.validUntil))")
            }
            entry = cached
        } else {
            metrics.cacheMisses.increment()
            entry = try verifyChain(header.certificates, at: date, now: now)
            cache.withLock { $0.insert(entry, for: header.chainKey) }
        }
        guard entry.rootFingerprint == header.rootFingerprint else {
            throw VerificationError(.invalidChain, "x5c[2] is not the root the chain ends in")
        }
        return entry
    }

    private func verifyChain(_ der: [[UInt8]], at date: Date, now: Date) throws(VerificationError) -> ChainCache.Entry {
        let leaf: X509Certificate
        let intermediate: X509Certificate
        do throws(CryptoError) {
            leaf = try X509Certificate(der: der[0])
            intermediate = try X509Certificate(der: der[1])
        } catch {
            throw VerificationError(.invalidChain, "x5c holds a certificate that does not parse")
        }
        guard leaf.hasExtension(oid: Self.leafOID), !leaf.isCA else {
            throw VerificationError(.invalidChain, "x5c[0] is not an App Store signing leaf (OID \(Self.leafOID), not a CA)")
        }
        guard intermediate.hasExtension(oid: Self.intermediateOID) else {
            throw VerificationError(.invalidChain, "x5c[1] lacks the Apple intermediate OID \(Self.intermediateOID)")
        }
        guard let leafKey = leaf.publicKey else {
            throw VerificationError(.invalidChain, "the leaf key is not an EC P-256 key")
        }
        let chain: [X509Certificate]
        do throws(CryptoError) {
            chain = try chainVerifier.verify(leaf: leaf, intermediates: [intermediate], at: date)
        } catch {
            throw VerificationError(.invalidChain, "chain does not verify to a configured root: \(error.reason)")
        }
        guard chain.count == 3, chain[0] == leaf, chain[1] == intermediate else {
            throw VerificationError(.invalidChain, "chain is not leaf → x5c[1] → configured root")
        }
        return ChainCache.Entry(
            leafKey: leafKey, chain: chain, rootFingerprint: chain[2].sha256Fingerprint,
            validFrom: chain.map(\.notBefore).max()!, validUntil: chain.map(\.notAfter).min()!, verifiedAt: now)
    }
}

/// Verified chains by (leaf, intermediate) fingerprint. Only time-dependent facts are
/// re-checked on a hit: the verification date must lie inside every certificate's validity
/// (everything else X509_verify_cert checked does not depend on the date), so a date outside
/// it is refused without redoing the chain work. An entry lives at most `lifetime`, as in
/// Apple's library, so later revocation checks get a chance to run.
struct ChainCache {
    struct Key: Hashable {
        let leaf: [UInt8]
        let intermediate: [UInt8]
    }

    struct Entry {
        let leafKey: P256PublicKey
        /// Leaf, intermediate, root: what online checks ask OCSP about.
        let chain: [X509Certificate]
        let rootFingerprint: [UInt8]
        let validFrom: Date
        let validUntil: Date
        let verifiedAt: Date
    }

    static let capacity = 32
    static let lifetime: TimeInterval = 15 * 60

    private var entries: [Key: Entry] = [:]
    /// Header segments (exact bytes) that led to a verified chain. A short list compared by
    /// length then memcmp: cheaper than hashing the ~5 KB segment on every verification.
    private var headers: [KnownHeader] = []

    /// A header segment that led to a verified chain, with SHA-256 of `header.` absorbed.
    struct KnownHeader {
        let segment: [UInt8]
        let header: SigningHeader
        let signingPrefix: SHA256Prefix
    }

    /// A fresh entry for `key`, or nil when there is none or it is older than `lifetime`.
    func lookup(_ key: Key, now: Date) -> Entry? {
        guard let entry = entries[key], abs(now.timeIntervalSince(entry.verifiedAt)) < Self.lifetime else { return nil }
        return entry
    }

    mutating func insert(_ entry: Entry, for key: Key) {
        if entries[key] == nil && entries.count >= Self.capacity,
            let oldest = entries.min(by: { $0.value.verifiedAt < $1.value.verifiedAt })?.key
        {
            entries[oldest] = nil
        }
        entries[key] = entry
    }

    func signingHeader(for segment: UnsafeBufferPointer<UInt8>) -> KnownHeader? {
        for known in headers where known.segment.count == segment.count {
            let same = known.segment.withUnsafeBufferPointer { memcmp($0.baseAddress!, segment.baseAddress!, segment.count) == 0 }
            if same { return known }
        }
        return nil
    }

    /// Remembers `header` for its segment; `signingInput` starts with the segment and its dot.
    mutating func remember(_ header: SigningHeader, for segment: UnsafeBufferPointer<UInt8>, signingInput: UnsafeBufferPointer<UInt8>) {
        guard !segment.isEmpty, signingInput.count > segment.count, signingHeader(for: segment) == nil else { return }
        // Apple's headers only differ when its certificates do: a full cache means churn, so
        // starting over costs little.
        if headers.count >= Self.capacity { headers.removeAll() }
        let prefix = SHA256Prefix(UnsafeRawBufferPointer(rebasing: UnsafeRawBufferPointer(signingInput)[0...segment.count]))
        headers.append(KnownHeader(segment: Array(segment), header: header, signingPrefix: prefix))
    }
}

/// Counters of verification outcomes (for the signature-failure alert) and chain cache misses.
private struct VerifierMetrics: Sendable {
    let accepted: Counter
    let refused: [VerificationError.Code: Counter]
    let cacheMisses: Counter

    init(registry: MetricsRegistry) {
        let name = "appstore_jws_verifications_total"
        let help = "App Store JWS verifications by result"
        accepted = registry.counter(name, help: help, labels: ["result": "OK"])
        refused = Dictionary(
            uniqueKeysWithValues: VerificationError.Code.allCases.map {
                ($0, registry.counter(name, help: help, labels: ["result": $0.rawValue]))
            })
        cacheMisses = registry.counter(
            "appstore_chain_cache_misses_total", help: "Certificate chains verified with OpenSSL (not from the cache)")
    }

    func record(_ code: VerificationError.Code?) {
        if let code { refused[code]?.increment() } else { accepted.increment() }
    }
}

extension AppStoreVerifierConfiguration {
    /// The configuration validated and its roots loaded as trust anchors: what every verifier of
    /// Apple's signed data (JWS, app receipts) starts from; a problem is a configuration error.
    func trustedChainVerifier() throws(ConfigurationError) -> X509ChainVerifier {
        try validate()
        do throws(CryptoError) {
            return try X509ChainVerifier(trustedRoots: rootCertificates)
        } catch {
            let reader = ConfigurationReader(environment: [:])
            reader.report("APPLE_IAP_ROOT_CERTS", nil, "certificates OpenSSL accepts as trust anchors (\(error.reason))")
            try reader.validate()
            fatalError("unreachable: a reported problem always throws")
        }
    }
}
