import Crypto
import Foundation
import FoundationNetworking
import ServiceRuntime
import Synchronization

/// The online part of verification: asks each certificate's OCSP responder (its Authority
/// Information Access URL) whether it is revoked, and remembers "good" answers until their
/// nextUpdate. Whatever keeps an answer from being had or trusted (network, timeout, HTTP
/// status, malformed or badly signed response, stale response, "unknown") is a
/// RETRYABLE_VERIFICATION error, never a pass; "revoked" is INVALID_CHAIN.
///
/// Sendable: immutable apart from the cache, which sits behind a Mutex.
final class RevocationChecker: Sendable {
    /// How long an answer without nextUpdate is reused (RFC 5019 leaves it to the client).
    static let lifetimeWithoutNextUpdate: TimeInterval = 60
    /// Bounds the cache; Apple has a handful of signing certificates at a time.
    static let capacity = 256

    private let trust: X509ChainVerifier
    private let timeout: Duration
    private let clock: any WallClock
    private let session: URLSession
    private let logger: Logger
    /// Certificate fingerprint → known good until.
    private let goodUntil = Mutex<[[UInt8]: Date]>([:])

    init(trust: X509ChainVerifier, timeout: Duration, clock: any WallClock, logger: Logger) {
        self.trust = trust
        self.timeout = timeout
        self.clock = clock
        self.logger = logger
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = URLSessionExchange.wholeSeconds(timeout)
        configuration.urlCache = nil
        session = URLSession(configuration: configuration)
    }

    deinit { session.invalidateAndCancel() }

    /// Whether a fresh "good" answer for `certificate` is at hand.
    func isKnownGood(_ fingerprint: [UInt8], now: Date) -> Bool {
        goodUntil.withLock { $0[fingerprint].map { $0 > now } ?? false }
    }

    /// OCSP for the leaf (issued by the intermediate) and the intermediate (issued by the root)
    /// of a verified chain, concurrently; the root is a configured trust anchor.
    func check(chain: [X509Certificate]) async throws(VerificationError) {
        let leaf: Result<Void, VerificationError>
        let intermediate: Result<Void, VerificationError>
        async let leafCheck = Self.result { () async throws(VerificationError) in try await self.check(chain[0], issuer: chain[1]) }
        async let intermediateCheck = Self.result { () async throws(VerificationError) in
            try await self.check(chain[1], issuer: chain[2])
        }
        (leaf, intermediate) = await (leafCheck, intermediateCheck)
        // A definite "revoked" outranks "could not tell" from the other certificate.
        for result in [leaf, intermediate] {
            if case .failure(let error) = result, error.code == .invalidChain { throw error }
        }
        try leaf.get()
        try intermediate.get()
    }

    private static func result(_ body: () async throws(VerificationError) -> Void) async -> Result<Void, VerificationError> {
        do throws(VerificationError) {
            try await body()
            return .success(())
        } catch { return .failure(error) }
    }

    /// Asks the responder about `certificate` (issued by `issuer`) unless a fresh answer is cached.
    func check(_ certificate: X509Certificate, issuer: X509Certificate) async throws(VerificationError) {
        if isKnownGood(certificate.sha256Fingerprint, now: clock.now()) { return }
        guard
            let url = certificate.ocspResponderURLs.lazy.compactMap(URL.init(string:)).first(where: {
                ["http", "https"].contains($0.scheme?.lowercased() ?? "")
            })
        else {
            throw VerificationError(.invalidChain, "\(certificate.subject) names no OCSP responder, so online checks cannot pass")
        }
        let request: OCSPRequest
        do throws(CryptoError) { request = try OCSPRequest(certificate: certificate, issuer: issuer) } catch {
            throw VerificationError(.invalidChain, "cannot build an OCSP request: \(error.reason)")
        }
        var urlRequest = URLRequest(url: url)
        urlRequest.httpMethod = "POST"
        urlRequest.timeoutInterval = URLSessionExchange.wholeSeconds(timeout)
        urlRequest.httpBody = Data(request.der)
        urlRequest.setValue("application/ocsp-request", forHTTPHeaderField: "Content-Type")
        urlRequest.setValue("application/ocsp-response", forHTTPHeaderField: "Accept")
        let body: Data
        switch await URLSessionExchange.perform(urlRequest, on: session, limit: timeout) {
        case .failure(.timedOut):
            throw unavailable("OCSP responder \(url.absoluteString) did not answer within \(timeout)")
        case .failure(.transport(let message)):
            throw unavailable("OCSP responder \(url.absoluteString) unreachable: \(message)")
        case .success((let data, let response)):
            guard response.statusCode == 200 else {
                throw unavailable("OCSP responder \(url.absoluteString) answered HTTP \(response.statusCode)")
            }
            body = data
        }
        let now = clock.now()
        let result: OCSPResult
        do throws(CryptoError) { result = try request.check(responseDER: Array(body), trust: trust, now: now) } catch {
            throw unavailable("OCSP response for \(certificate.subject) is not usable: \(error.reason)")
        }
        switch result.status {
        case .good:
            let until = result.nextUpdate ?? now + Self.lifetimeWithoutNextUpdate
            goodUntil.withLock { cache in
                if cache.count >= Self.capacity { cache = cache.filter { $0.value > now } }
                if cache.count >= Self.capacity { cache.removeAll() }
                cache[certificate.sha256Fingerprint] = until
            }
        case .revoked(let date):
            throw VerificationError(.invalidChain, "\(certificate.subject) is revoked\(date.map { " since \($0)" } ?? "") (OCSP)")
        case .unknown:
            throw unavailable("OCSP responder does not know \(certificate.subject)")
        }
    }

    private func unavailable(_ reason: String) -> VerificationError {
        logger.warning("online certificate check failed", ["appstore.reason": .string(reason)])
        return VerificationError(.retryableVerification, reason)
    }
}
