import AppStore
import Crypto
import Foundation
import HTTPServer
import StrictJSON
import Synchronization

/// The business user a request acts for, taken from a verified bearer token.
struct AuthenticatedUser: Sendable, Equatable {
    let userID: String
}

/// Verifies client bearer tokens: compact JWTs signed with HS256 (shared secret) or with ES256 /
/// RS256 (the identity provider's public key). `sub` is the user id; `exp` is required and enforced
/// (with a small allowance for clock skew), `nbf` too when present.
struct UserAuthenticator: Sendable {
    private enum Method: Sendable {
        case hs256([UInt8])
        case publicKey(PublicKey)
    }
    private let method: Method
    private let now: @Sendable () -> Date
    private let verified = VerifiedTokens()
    static let clockSkew: TimeInterval = 60

    init(settings: UserTokenSettings, now: @escaping @Sendable () -> Date = Date.init) throws {
        if let secret = settings.hs256Secret {
            method = .hs256(secret)
        } else if let pem = settings.publicKeyPEM {
            method = .publicKey(try PublicKey(pem: pem))
        } else {
            throw APIError.unauthorized("no user token verification configured")
        }
        self.now = now
    }

    func authenticate(_ request: HTTPRequest) throws(HTTPError) -> AuthenticatedUser {
        // On bytes: Foundation's trimming and lowercasing cost more than a cached verification.
        guard let header = request.header("authorization")?.utf8, header.count > 7,
            header.prefix(7).map({ $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }).elementsEqual("bearer ".utf8)
        else { throw APIError.unauthorized() }
        let blank: (UInt8) -> Bool = { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
        let token = header.dropFirst(7).drop(while: blank)
        return try verify(String(Substring(token.prefix(token.count - token.reversed().prefix(while: blank).count))))
    }

    /// A token seen before skips the signature and JSON work; its expiry is still checked.
    func verify(_ token: String) throws(HTTPError) -> AuthenticatedUser {
        let current = now().timeIntervalSince1970
        if let user = verified.user(for: token, at: current - Self.clockSkew) { return user }
        // Once valid, a token stays valid until its exp (its nbf, if any, has passed).
        let (user, expiry) = try verifyFully(token, at: current)
        verified.insert(token, user: user, expiry: expiry)
        return user
    }

    private func verifyFully(_ token: String, at current: TimeInterval) throws(HTTPError)
        -> (AuthenticatedUser, expiry: TimeInterval)
    {
        guard token.utf8.count <= 8192, let parts = JWSParts(token),
            let headerBytes = Base64URL.decode(parts.header), let payloadBytes = Base64URL.decode(parts.payload),
            let signature = Base64URL.decode(parts.signature),
            // Strict: a duplicated claim could mean one thing here and another to the token's issuer.
            let header = Self.object(headerBytes), let claims = Self.object(payloadBytes),
            case .string(let alg)? = header["alg"]
        else { throw APIError.unauthorized("malformed bearer token") }
        let signedInput = Array(parts.signingInput.utf8)
        let valid: Bool
        switch (method, alg) {
        case (.hs256(let secret), "HS256"):
            valid = constantTimeEquals(HMACSHA256.authenticate(key: secret, message: signedInput), signature)
        case (.publicKey(let key), "ES256"), (.publicKey(let key), "RS256"):
            // The algorithm must be the key's own: a token cannot pick a weaker verification.
            guard let algorithm = JWSAlgorithm(rawValue: alg), algorithm == key.algorithm else {
                throw APIError.unauthorized("bearer token algorithm does not match the configured key")
            }
            valid = key.isValidSignature(signature, for: signedInput, algorithm: algorithm)
        default:
            throw APIError.unauthorized("bearer token algorithm not accepted")
        }
        guard valid else { throw APIError.unauthorized("bearer token signature is invalid") }
        guard let exp = Self.seconds(claims["exp"]), exp + Self.clockSkew > current else {
            throw APIError.unauthorized("bearer token expired or without exp")
        }
        if let nbf = claims["nbf"] {
            // A time claim that is not a number is refused, never skipped.
            guard let nbf = Self.seconds(nbf), nbf - Self.clockSkew <= current else {
                throw APIError.unauthorized("bearer token not yet valid")
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

    func insert(_ token: String, user: AuthenticatedUser, expiry: TimeInterval) {
        entries.withLock { entries in
            if entries.count >= capacity { entries.removeAll(keepingCapacity: true) }
            entries[token] = Entry(user: user, expiry: expiry)
        }
    }
}
