import AppStore
import Crypto
import Foundation
import HTTPServer
import ServiceRuntime
import StrictJSON
import Synchronization

/// The business user a request acts for, taken from a verified bearer token.
struct AuthenticatedUser: Sendable, Equatable {
    let userID: String
}

/// Verifies client bearer tokens: compact JWTs whose `sub` is the user id, signed with one of
/// the HS256 secrets (the token's `kid` picks it), with the configured public key, or with a key
/// of the identity provider's JWK Set (RS256, ES256, EdDSA; the token's `kid` finds it). `exp` is
/// required, `nbf` and `iat` honoured when present, each with `clockSkew` of leeway; `iss` and
/// `aud` are checked when configured. A refusal is 401 UNAUTHORIZED whose message says why,
/// never with a secret or the token in it.
struct UserAuthenticator: Sendable {
    private enum Keys: Sendable {
        case hs256([UserTokenSettings.Secret])
        case publicKey(PublicKey)
        case jwks(JSONWebKeySetCache)
    }
    private let keys: Keys
    private let issuer: String?
    private let audience: String?
    private let clock: any WallClock
    private let verified: VerifiedTokens
    /// Leeway for `exp`, `nbf` and `iat` against clocks that disagree a little.
    static let clockSkew: TimeInterval = 60

    init(settings: UserTokenSettings, clock: any WallClock = SystemClock(), logger: Logger = Logger(label: "ingress")) throws {
        let verified = VerifiedTokens()
        if let url = settings.jwksURL {
            keys = .jwks(
                JSONWebKeySetCache(
                    url: url, minimumInterval: settings.jwksMinimumRefreshInterval, clock: clock, logger: logger,
                    onKeysRemoved: { verified.removeAll() }))
        } else if let pem = settings.publicKeyPEM {
            keys = .publicKey(try PublicKey(pem: pem))
        } else if !settings.hs256Secrets.isEmpty {
            keys = .hs256(settings.hs256Secrets)
        } else {
            throw APIError.unauthorized("no user token verification configured")
        }
        self.verified = verified
        issuer = settings.issuer
        audience = settings.audience
        self.clock = clock
    }

    func authenticate(_ request: HTTPRequest) async throws(HTTPError) -> AuthenticatedUser {
        // On bytes: Foundation's trimming and lowercasing cost more than a cached verification.
        guard let header = request.header("authorization")?.utf8, header.count > 7,
            header.prefix(7).map({ $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }).elementsEqual("bearer ".utf8)
        else { throw APIError.unauthorized() }
        let blank: (UInt8) -> Bool = { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
        let token = header.dropFirst(7).drop(while: blank)
        return try await verify(String(Substring(token.prefix(token.count - token.reversed().prefix(while: blank).count))))
    }

    /// A token seen before skips the signature and JSON work; its expiry is still checked.
    func verify(_ token: String) async throws(HTTPError) -> AuthenticatedUser {
        let current = clock.now().timeIntervalSince1970
        if let user = verified.user(for: token, at: current - Self.clockSkew) { return user }
        // Once valid, a token stays valid until its exp (its nbf and iat have passed, its key
        // stays until a JWK Set drops it, which empties the cache).
        let (user, expiry) = try await verifyFully(token, at: current)
        verified.insert(token, user: user, expiry: expiry)
        return user
    }

    private func verifyFully(_ token: String, at current: TimeInterval) async throws(HTTPError)
        -> (AuthenticatedUser, expiry: TimeInterval)
    {
        guard token.utf8.count <= 8192, let parts = JWSParts(token),
            let headerBytes = Base64URL.decode(parts.header), let payloadBytes = Base64URL.decode(parts.payload),
            let signature = Base64URL.decode(parts.signature),
            // Strict: a duplicated claim could mean one thing here and another to the token's issuer.
            let header = Self.object(headerBytes), let claims = Self.object(payloadBytes),
            case .string(let alg)? = header["alg"]
        else { throw APIError.unauthorized("malformed bearer token") }
        let kid: String?
        switch header["kid"] {
        case nil: kid = nil
        case .string(let value)?: kid = value
        default: throw APIError.unauthorized("malformed bearer token")
        }
        // RFC 7515 §4.1.11: an extension the verifier does not implement voids the token. (`jku`,
        // `x5u` and `jwk` are ignored: keys never come from the token itself.)
        guard header["crit"] == nil else { throw APIError.unauthorized("bearer token has critical header extensions") }
        let valid = try await isValidSignature(signature, of: Array(parts.signingInput.utf8), alg: alg, kid: kid)
        guard valid else { throw APIError.unauthorized("bearer token signature is invalid") }
        return try checkClaims(claims, at: current)
    }

    /// Whether the configured keys say `signature` signs `input`; throws when no key may check it.
    private func isValidSignature(_ signature: [UInt8], of input: [UInt8], alg: String, kid: String?) async throws(HTTPError)
        -> Bool
    {
        // Only the configured family's algorithms: never `none`, never HS256 against a public key
        // (whose bytes an attacker knows), never a public-key algorithm against a secret.
        let unsupported = APIError.unauthorized("bearer token algorithm is not accepted")
        let unknownKey = APIError.unauthorized("bearer token signed with an unknown key")
        switch keys {
        case .hs256(let secrets):
            guard alg == "HS256" else { throw unsupported }
            // The secret the kid names; otherwise the unnamed secret, and every secret for a token
            // without a kid (tokens made before kids were introduced).
            var candidates = secrets.filter { $0.kid != nil && $0.kid == kid }
            if candidates.isEmpty { candidates = secrets.filter { $0.kid == nil || kid == nil } }
            guard !candidates.isEmpty else { throw unknownKey }
            var valid = false
            for secret in candidates where constantTimeEquals(HMACSHA256.authenticate(key: secret.bytes, message: input), signature) {
                valid = true
            }
            return valid
        case .publicKey(let key):
            guard let algorithm = JWSAlgorithm(rawValue: alg), algorithm == key.algorithm else { throw unsupported }
            return key.isValidSignature(signature, for: input, algorithm: algorithm)
        case .jwks(let set):
            guard let algorithm = JWSAlgorithm(rawValue: alg) else { throw unsupported }
            let candidates: [PublicKey]
            do throws(JSONWebKeySetCache.LookupFailure) {
                candidates = try await set.keys(kid: kid, algorithm: algorithm)
            } catch {
                switch error {
                case .unknownKey: throw unknownKey
                case .unavailable:
                    throw APIError.serviceUnavailable("the identity provider's signing keys are not available; retry later")
                }
            }
            return candidates.contains { $0.isValidSignature(signature, for: input, algorithm: algorithm) }
        }
    }

    private func checkClaims(_ claims: [String: StrictJSON.Value], at current: TimeInterval) throws(HTTPError)
        -> (AuthenticatedUser, expiry: TimeInterval)
    {
        // A time claim that is not a number is refused, never skipped.
        guard let expClaim = claims["exp"] else { throw APIError.unauthorized("bearer token without exp") }
        guard let exp = Self.seconds(expClaim) else { throw APIError.unauthorized("bearer token exp is not a number") }
        guard exp + Self.clockSkew > current else { throw APIError.unauthorized("bearer token expired") }
        if let nbf = claims["nbf"] {
            guard let nbf = Self.seconds(nbf), nbf - Self.clockSkew <= current else {
                throw APIError.unauthorized("bearer token not yet valid")
            }
        }
        if let iat = claims["iat"] {
            guard let iat = Self.seconds(iat), iat - Self.clockSkew <= current else {
                throw APIError.unauthorized("bearer token issued in the future")
            }
        }
        if let issuer {
            guard case .string(issuer)? = claims["iss"] else { throw APIError.unauthorized("bearer token from another issuer") }
        }
        if let audience {
            let aud = claims["aud"]
            let audiences: [StrictJSON.Value] = if case .array(let values)? = aud { values } else { aud.map { [$0] } ?? [] }
            guard audiences.contains(where: { if case .string(audience) = $0 { true } else { false } }) else {
                throw APIError.unauthorized("bearer token for another audience")
            }
        }
        guard case .string(let sub)? = claims["sub"], !sub.isEmpty, sub.count <= 128 else {
            throw APIError.unauthorized("bearer token without a subject")
        }
        return (AuthenticatedUser(userID: sub), exp)
    }

    /// The members of a JSON object in strict syntax (no duplicate names), else nil.
    private static func object(_ bytes: [UInt8]) -> [String: StrictJSON.Value]? {
        let parsed = try? bytes.withUnsafeBufferPointer { try StrictJSON.parse($0) }
        guard case .object(let members)? = parsed else { return nil }
        return Dictionary(members.map { ($0.key, $0.value) }, uniquingKeysWith: { first, _ in first })
    }

    /// A NumericDate claim (seconds since the epoch, a JSON number).
    private static func seconds(_ value: StrictJSON.Value?) -> TimeInterval? {
        switch value {
        case .integer(let seconds)?: TimeInterval(seconds)
        case .double(let seconds)?: seconds
        default: nil
        }
    }
}

/// Tokens whose signature and claims were verified, with their subject and expiry: a client
/// sends the same token on every call, and verifying it (HMAC or ES256, two JSON documents) cost
/// more than the read it authorises. Keyed by the whole token, signature included, so a token
/// differing in any byte is verified afresh. Bounded: emptied when full.
final class VerifiedTokens: Sendable {
    private struct Entry {
        let user: AuthenticatedUser
        let expiry: TimeInterval
    }
    private let entries = Mutex<[String: Entry]>([:])
    private let capacity = 10_000

    /// The token's user if it was verified and its `exp` is after `time`; an expired entry is dropped.
    func user(for token: String, at time: TimeInterval) -> AuthenticatedUser? {
        entries.withLock { entries in
            guard let entry = entries[token] else { return nil }
            guard entry.expiry > time else {
                entries[token] = nil
                return nil
            }
            return entry.user
        }
    }

    /// Forgets every token, e.g. when a key that verified some of them is gone.
    func removeAll() { entries.withLock { $0.removeAll() } }

    func insert(_ token: String, user: AuthenticatedUser, expiry: TimeInterval) {
        entries.withLock { entries in
            if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
            entries[token] = Entry(user: user, expiry: expiry)
        }
    }
}
