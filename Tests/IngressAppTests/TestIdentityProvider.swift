import Crypto
import Foundation
import HTTPServer
import ServiceRuntime
import Synchronization

/// A signing key of the test identity provider, made when the test runs, and the tokens it signs.
struct TestSigningKey: Sendable {
    let kid: String?
    let key: JWSSigningKey

    init(_ algorithm: JWSAlgorithm, kid: String?) {
        self.kid = kid
        key = JWSSigningKey.generate(algorithm)
    }

    /// The public half as a JWK, `extra` members over the usual ones.
    func jwk(_ extra: [String: String] = [:]) -> [String: String] {
        var members = ["use": "sig", "alg": key.algorithm.rawValue]
        switch key.publicKey.components {
        case .rsa(let n, let e): members.merge(["kty": "RSA", "n": Base64URL.encode(n), "e": Base64URL.encode(e)]) { $1 }
        case .p256(let x, let y): members.merge(["kty": "EC", "crv": "P-256", "x": Base64URL.encode(x), "y": Base64URL.encode(y)]) { $1 }
        case .ed25519(let x): members.merge(["kty": "OKP", "crv": "Ed25519", "x": Base64URL.encode(x)]) { $1 }
        }
        members["kid"] = kid
        return members.merging(extra) { $1 }
    }

    /// A JWT with these claims (a JSON object's text) signed by this key, its kid in the header.
    func token(_ claims: String) -> String {
        TestTokens.token(header: TestTokens.header(alg: key.algorithm.rawValue, kid: kid), claims: claims) {
            try! key.signature(for: $0)
        }
    }

    /// A token for `sub` valid for the next ten minutes.
    func token(sub: String = "user-42") -> String { token(TestTokens.claims(sub: sub)) }
}

/// Hand-made JWTs: any header, any claims, any signature.
enum TestTokens {
    static func header(alg: String, kid: String? = nil) -> String {
        kid.map { #"{"alg":"\#(alg)","typ":"JWT","kid":"\#($0)"}"# } ?? #"{"alg":"\#(alg)","typ":"JWT"}"#
    }

    /// `sub` and an `exp` `expiresIn` seconds from now, `extra` members appended (`,"iss":"…"`).
    static func claims(sub: String = "user-42", expiresIn: TimeInterval = 600, extra: String = "") -> String {
        #"{"sub":"\#(sub)","exp":\#(Int(Date().timeIntervalSince1970 + expiresIn))\#(extra)}"#
    }

    static func token(header: String, claims: String, sign: ([UInt8]) -> [UInt8]) -> String {
        let input = "\(Base64URL.encode(Array(header.utf8))).\(Base64URL.encode(Array(claims.utf8)))"
        return "\(input).\(Base64URL.encode(sign(Array(input.utf8))))"
    }

    /// HS256 with `secret`'s text as the key, as identity providers use shared secrets.
    static func hs256(_ secret: String, kid: String? = nil, claims: String = claims()) -> String {
        token(header: header(alg: "HS256", kid: kid), claims: claims) {
            HMACSHA256.authenticate(key: Array(secret.utf8), message: $0)
        }
    }
}

/// The identity provider's JWK Set endpoint on 127.0.0.1 (a free port): serves the keys the test
/// publishes, with the Cache-Control it sets, and counts the fetches.
final class TestJWKSServer: Sendable {
    private struct State {
        var document: [UInt8] = Array(#"{"keys":[]}"#.utf8)
        var cacheControl: String?
        var status = 200
        var fetches = 0
    }

    private let state = Locked(State())
    private let server: HTTPServer

    private init() {
        var router = Router()
        let state = self.state
        router.get("/jwks") { _ in
            let (document, cacheControl, status) = state.withLock { state in
                state.fetches += 1
                return (state.document, state.cacheControl, state.status)
            }
            var headers = [("Content-Type", "application/jwk-set+json")]
            if let cacheControl { headers.append(("Cache-Control", cacheControl)) }
            return HTTPResponse(status: status, headers: headers, body: status == 200 ? document : [])
        }
        server = HTTPServer(
            configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 2, shutdownGracePeriod: .milliseconds(200)),
            router: router, logger: Logger(label: "test.jwks", level: .warning))
    }

    /// Runs `body` with a started server, shut down afterwards whatever happens.
    static func with<R>(_ body: (TestJWKSServer) async throws -> R) async throws -> R {
        let server = TestJWKSServer()
        try server.server.start()
        do {
            let result = try await body(server)
            await server.server.shutdown()
            return result
        } catch {
            await server.server.shutdown()
            throw error
        }
    }

    var url: URL { URL(string: "http://127.0.0.1:\(server.port)/jwks")! }

    /// GET requests answered so far.
    var fetches: Int { state.value.fetches }

    /// Serves these keys from the next fetch on.
    func publish(_ keys: [TestSigningKey]) { publish(jwks: keys.map { $0.jwk() }) }

    /// Serves these JWKs as they are.
    func publish(jwks: [[String: String]]) {
        let document = try! JSONSerialization.data(withJSONObject: ["keys": jwks])
        state.withLock { $0.document = Array(document) }
    }

    func setCacheControl(_ value: String?) { state.withLock { $0.cacheControl = value } }

    /// Answers this status (without a body) instead of the set.
    func setStatus(_ status: Int) { state.withLock { $0.status = status } }
}
