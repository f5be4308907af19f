import AppStore
import Crypto
import Foundation
import FoundationNetworking
import ServiceRuntime
import StrictJSON
import Synchronization

/// One signing key of a JWK Set that this service can use: its `kid` (if any), the one
/// algorithm it verifies and the key.
struct JSONWebKey: Sendable {
    let kid: String?
    let algorithm: JWSAlgorithm
    let key: PublicKey
    /// What the key is, for telling whether a new set dropped it.
    let components: PublicKeyComponents
}

/// Reading a JWK Set document (RFC 7517 §5).
enum JSONWebKeySet {
    /// The signature keys the set publishes for RS256, ES256 (P-256) or EdDSA (Ed25519), and how
    /// many other keys it holds; nil when the document is not a JWK Set. Keys for encryption,
    /// other algorithms or curves, and keys that do not parse are skipped, not fatal: providers
    /// publish such keys beside their signing keys.
    static func parse(_ bytes: [UInt8]) -> (keys: [JSONWebKey], skipped: Int)? {
        let document = try? bytes.withUnsafeBufferPointer { try StrictJSON.parse($0) }
        guard case .object(let members)? = document, let entry = members.first(where: { $0.key == "keys" }),
            case .array(let entries) = entry.value
        else { return nil }
        let keys = entries.compactMap { entry -> JSONWebKey? in
            guard case .object(let members) = entry else { return nil }
            return key(Dictionary(members.map { ($0.key, $0.value) }, uniquingKeysWith: { first, _ in first }))
        }
        return (keys, entries.count - keys.count)
    }

    private static func key(_ members: [String: StrictJSON.Value]) -> JSONWebKey? {
        func string(_ name: String) -> String? {
            guard case .string(let value)? = members[name] else { return nil }
            return value
        }
        func bytes(_ name: String) -> [UInt8]? { string(name).flatMap { Base64URL.decode($0) } }
        if let use = members["use"] {
            guard case .string("sig") = use else { return nil }
        }
        if let operations = members["key_ops"] {
            guard case .array(let list) = operations, list.contains(where: { if case .string("verify") = $0 { true } else { false } })
            else { return nil }
        }
        let kid: String?
        switch members["kid"] {
        case nil: kid = nil
        case .string(let value)?: kid = value
        default: return nil
        }
        let components: PublicKeyComponents
        switch (string("kty"), string("crv")) {
        case ("RSA", _):
            guard let n = bytes("n"), let e = bytes("e") else { return nil }
            components = .rsa(modulus: n, exponent: e)
        case ("EC", "P-256"):
            guard let x = bytes("x"), let y = bytes("y") else { return nil }
            components = .p256(x: x, y: y)
        case ("OKP", "Ed25519"):
            guard let x = bytes("x") else { return nil }
            components = .ed25519(x)
        default:
            return nil
        }
        guard let key = try? PublicKey(components: components) else { return nil }
        // A key that names its algorithm is used for that one only: an RSA key marked PS256 or
        // RSA-OAEP is not an RS256 key.
        if let alg = members["alg"] {
            guard case .string(key.algorithm.rawValue) = alg else { return nil }
        }
        return JSONWebKey(kid: kid, algorithm: key.algorithm, key: key, components: components)
    }
}

/// The identity provider's signing keys (`USER_TOKEN_JWKS_URL`), fetched and kept in memory so
/// that verifying a token never waits for the network while its key is known.
///
/// A `kid` the cached set lacks fetches the set again, at most once per `minimumInterval` however
/// many unknown kids arrive (every fetch counts, whatever started it), and concurrent requests
/// wait for the same fetch. A set older than its Cache-Control max-age, bounded to
/// `minimumInterval` (at least 5 minutes) … 24 hours and 1 hour without one, is fetched again in
/// the background while its keys keep serving. A failed fetch keeps the keys it would have
/// replaced. Only https is fetched (plain http to a loopback address), a redirect included.
///
/// Sendable: the mutable state sits behind one Mutex; URLSession is thread-safe.
final class JSONWebKeySetCache: Sendable {
    /// Why no key was found.
    enum LookupFailure: Error {
        /// The current set has no key for the token, and may not be fetched again yet.
        case unknownKey
        /// No set was ever fetched: the provider is unreachable or answers nonsense.
        case unavailable
    }

    private struct State {
        var keys: [JSONWebKey] = []
        var loaded = false
        var staleAt = Date.distantPast
        var lastFetch: Date?
        var fetch: Task<Void, Never>?
    }

    private enum Lookup {
        case found([PublicKey])
        case wait(Task<Void, Never>)
        case missing(loaded: Bool)
    }

    let url: URL
    let minimumInterval: TimeInterval
    private let state = Mutex(State())
    private let session: URLSession
    private let clock: any WallClock
    private let logger: Logger
    private let onKeysRemoved: @Sendable () -> Void

    static let fetchTimeout: Duration = .seconds(5)
    static let maximumDocumentBytes = 512 * 1024
    static let defaultMaxAge: TimeInterval = 3600
    static let maximumMaxAge: TimeInterval = 86_400
    static let minimumMaxAge: TimeInterval = 300

    /// Starts fetching at once, so the first requests find the keys there. `onKeysRemoved` runs
    /// when a fetch drops a key the previous set had (tokens it verified must not outlive it).
    init(
        url: URL, minimumInterval: TimeInterval, clock: any WallClock, logger: Logger,
        onKeysRemoved: @escaping @Sendable () -> Void = {}
    ) {
        self.url = url
        self.minimumInterval = minimumInterval
        self.clock = clock
        self.logger = logger.with(["jwks.host": .string(url.host ?? "")])
        self.onKeysRemoved = onKeysRemoved
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = URLSessionExchange.wholeSeconds(Self.fetchTimeout)
        configuration.timeoutIntervalForResource = URLSessionExchange.wholeSeconds(Self.fetchTimeout)
        configuration.httpCookieAcceptPolicy = .never
        configuration.urlCache = nil
        session = URLSession(configuration: configuration)
        let now = clock.now()
        state.withLock { _ = startFetch(&$0, now: now) }
    }

    deinit { session.invalidateAndCancel() }

    /// The keys that may have signed a token with this `kid` (nil: every key) and algorithm.
    func keys(kid: String?, algorithm: JWSAlgorithm) async throws(LookupFailure) -> [PublicKey] {
        let now = clock.now()
        let lookup = state.withLock { state -> Lookup in
            let found = Self.matching(state.keys, kid: kid, algorithm: algorithm)
            if !found.isEmpty {
                if now >= state.staleAt { _ = startFetch(&state, now: now) }
                return .found(found)
            }
            if let fetch = state.fetch ?? startFetch(&state, now: now) { return .wait(fetch) }
            return .missing(loaded: state.loaded)
        }
        switch lookup {
        case .found(let keys):
            return keys
        case .missing(let loaded):
            throw loaded ? .unknownKey : .unavailable
        case .wait(let fetch):
            await fetch.value
            let (found, loaded) = state.withLock { (Self.matching($0.keys, kid: kid, algorithm: algorithm), $0.loaded) }
            guard found.isEmpty else { return found }
            throw loaded ? .unknownKey : .unavailable
        }
    }

    private static func matching(_ keys: [JSONWebKey], kid: String?, algorithm: JWSAlgorithm) -> [PublicKey] {
        keys.filter { $0.algorithm == algorithm && (kid == nil || $0.kid == kid) }.map(\.key)
    }

    /// The running fetch, or a new one when the last began at least `minimumInterval` ago (or
    /// the clock went back); nil when neither.
    private func startFetch(_ state: inout State, now: Date) -> Task<Void, Never>? {
        if let fetch = state.fetch { return fetch }
        if let last = state.lastFetch, now.timeIntervalSince(last) >= 0, now.timeIntervalSince(last) < minimumInterval {
            return nil
        }
        state.lastFetch = now
        let fetch = Task { await self.refresh() }
        state.fetch = fetch
        return fetch
    }

    private func refresh() async {
        let result = await download()
        let now = clock.now()
        let removed = state.withLock { state -> Bool in
            state.fetch = nil
            guard case .success(let set) = result else { return false }
            let kept = Set(set.keys.map { KeyIdentity($0) })
            let removed = state.keys.contains { !kept.contains(KeyIdentity($0)) }
            state.keys = set.keys
            state.loaded = true
            let maxAge = min(max(set.maxAge ?? Self.defaultMaxAge, minimumInterval, Self.minimumMaxAge), Self.maximumMaxAge)
            state.staleAt = now.addingTimeInterval(maxAge)
            return removed
        }
        switch result {
        case .success(let set):
            logger.info("user token keys fetched", ["jwks.keys": LogValue(set.keys.count), "jwks.skipped": LogValue(set.skipped)])
        case .failure(let reason):
            logger.warning("user token keys not fetched; the previous keys stay in use", ["error.reason": .string(reason.text)])
        }
        if removed { onKeysRemoved() }
    }

    private struct KeyIdentity: Hashable {
        let kid: String?
        let components: PublicKeyComponents
        init(_ key: JSONWebKey) {
            kid = key.kid
            components = key.components
        }
    }

    private struct FetchFailure: Error {
        let text: String
    }

    private func download() async -> Result<(keys: [JSONWebKey], skipped: Int, maxAge: TimeInterval?), FetchFailure> {
        var request = URLRequest(url: url)
        request.httpMethod = "GET"
        request.setValue("application/jwk-set+json, application/json", forHTTPHeaderField: "Accept")
        request.timeoutInterval = URLSessionExchange.wholeSeconds(Self.fetchTimeout)
        let (data, response): (Data, HTTPURLResponse)
        switch await URLSessionExchange.perform(request, on: session, limit: Self.fetchTimeout) {
        case .success(let exchange): (data, response) = exchange
        case .failure(.timedOut): return .failure(FetchFailure(text: "timed out"))
        case .failure(.transport(let detail)): return .failure(FetchFailure(text: detail))
        }
        // URLSession follows redirects on its own: where the keys finally came from must be as
        // trustworthy as the configured URL.
        guard let finalURL = response.url, UserTokenSettings.isAcceptableJWKSURL(finalURL) else {
            return .failure(FetchFailure(text: "redirected to a URL that is not https"))
        }
        guard response.statusCode == 200 else { return .failure(FetchFailure(text: "HTTP status \(response.statusCode)")) }
        guard data.count <= Self.maximumDocumentBytes else { return .failure(FetchFailure(text: "document too large")) }
        guard let set = JSONWebKeySet.parse(Array(data)) else { return .failure(FetchFailure(text: "not a JWK Set")) }
        guard !set.keys.isEmpty else {
            return .failure(FetchFailure(text: "no RS256, ES256 (P-256) or EdDSA (Ed25519) signature key in the set"))
        }
        let cacheControl = response.allHeaderFields.first { ($0.key as? String)?.lowercased() == "cache-control" }?.value
        return .success((set.keys, set.skipped, (cacheControl as? String).flatMap(Self.maxAge)))
    }

    /// Seconds of `max-age` in a Cache-Control value (0 for `no-cache` / `no-store`), else nil.
    static func maxAge(_ cacheControl: String) -> TimeInterval? {
        for directive in cacheControl.lowercased().split(separator: ",") {
            let directive = directive.trimmingCharacters(in: .whitespaces)
            if directive == "no-cache" || directive == "no-store" { return 0 }
            if directive.hasPrefix("max-age="), let seconds = Int(directive.dropFirst("max-age=".count)), seconds >= 0 {
                return TimeInterval(seconds)
            }
        }
        return nil
    }
}
