import Crypto
import Foundation
import ServiceRuntime
import Synchronization

/// Makes the ES256 bearer tokens of the App Store Server API and keeps one until shortly
/// before it expires (signing costs an ECDSA signature; Apple accepts a token until `exp`).
///
/// Header `{"alg":"ES256","kid":…,"typ":"JWT"}`; claims `iss`, `iat`, `exp` (at most 60 minutes
/// after `iat`, Apple's limit), `aud` `appstoreconnect-v1`, `bid`.
///
/// Sendable: the configuration is immutable and the cached token sits behind a Mutex.
final class AppStoreAPITokenSource: Sendable {
    /// Well under Apple's 60-minute limit, so a clock a little ahead of Apple's still passes.
    static let lifetime: TimeInterval = 30 * 60
    /// A token this close to `exp` is replaced, so it cannot expire while a request is in flight.
    static let renewalMargin: TimeInterval = 5 * 60

    private struct Cached {
        let token: String
        let expires: Date
    }

    private let issuerId: String
    private let keyId: String
    private let bundleId: String
    private let key: P256PrivateKey
    private let clock: any WallClock
    private let cached = Mutex<Cached?>(nil)

    init(configuration: AppStoreServerAPIConfiguration, clock: any WallClock) {
        issuerId = configuration.issuerId
        keyId = configuration.keyId
        bundleId = configuration.bundleId
        key = configuration.signingKey
        self.clock = clock
    }

    /// A valid token: the cached one, or a freshly signed one.
    func token() throws(AppStoreAPIError) -> String {
        let now = clock.now()
        if let current = cached.withLock({ $0 }), current.expires.timeIntervalSince(now) > Self.renewalMargin {
            return current.token
        }
        let fresh = try sign(now: now)
        cached.withLock { $0 = fresh }
        return fresh.token
    }

    /// Drops `token` if it is still the cached one (Apple refused it: 401).
    func invalidate(_ token: String) {
        cached.withLock { if $0?.token == token { $0 = nil } }
    }

    private struct Claims: Encodable {
        let iss: String
        let iat: Int64
        let exp: Int64
        let aud = "appstoreconnect-v1"
        let bid: String
    }

    private func sign(now: Date) throws(AppStoreAPIError) -> Cached {
        let issuedAt = Int64(now.timeIntervalSince1970.rounded(.down))
        let expires = issuedAt + Int64(Self.lifetime)
        do {
            let token = try AppStoreJWS.sign(Claims(iss: issuerId, iat: issuedAt, exp: expires, bid: bundleId), keyId: keyId, key: key)
            return Cached(token: token, expires: Date(timeIntervalSince1970: TimeInterval(expires)))
        } catch {
            throw AppStoreAPIError(kind: .invalidRequest, message: "cannot sign the API token: \(error)", attempts: 0)
        }
    }
}
