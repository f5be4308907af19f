import Crypto
import Foundation
import HTTPServer
import ServiceRuntime
import TestSupport
import Testing

@testable import IngressApp

/// Bearer tokens verified with the identity provider's JWK Set, fetched over HTTP from a local
/// server that counts the fetches; the clock is the test's, so "an interval later" is exact.
@Suite(.timeLimit(.minutes(3)))
struct UserTokenJWKSTests {
    let clock = ManualClock(Date())

    func authenticator(_ server: TestJWKSServer, minimumRefresh: TimeInterval = 30, issuer: String? = nil, audience: String? = nil)
        throws -> UserAuthenticator
    {
        try UserAuthenticator(
            settings: UserTokenSettings(jwksURL: server.url, jwksMinimumRefreshInterval: minimumRefresh, issuer: issuer, audience: audience),
            clock: clock, logger: Logger(label: "test", level: .warning))
    }

    /// The 401 message of a refused token, or nil when it was accepted.

    @Test func rs256ES256AndEdDSATokensOfTheSetAreAccepted() async throws {
        try await TestJWKSServer.with { server in
            let keys = [TestSigningKey(.rs256, kid: "rsa"), TestSigningKey(.es256, kid: "ec"), TestSigningKey(.edDSA, kid: "ed")]
            // A token without kid is checked against every key of its algorithm.
            let anonymous = TestSigningKey(.edDSA, kid: nil)
            server.publish(keys + [anonymous])
            let authenticator = try authenticator(server)
            for key in keys + [anonymous] {
                let sub = "user-\(key.kid ?? "none")"
                #expect(try await authenticator.verify(key.token(sub: sub)).userID == sub)
            }
            #expect(server.fetches == 1)
        }
    }

    @Test func aForeignKeyOrAMismatchedAlgorithmIsRefused() async throws {
        try await TestJWKSServer.with { server in
            let rsa = TestSigningKey(.rs256, kid: "k1")
            server.publish([rsa])
            let authenticator = try authenticator(server)
            #expect(try await authenticator.verify(rsa.token()).userID == "user-42")
            // The kid of the provider's key, the signature of another key.
            let impostor = TestSigningKey(.rs256, kid: "k1")
            #expect(await refusal(authenticator, impostor.token()) == "bearer token signature is invalid")
            // The kid of the RSA key on an ES256 token: no key of that kid verifies ES256.
            let ec = TestSigningKey(.es256, kid: "k1")
            #expect(await refusal(authenticator, ec.token()) == "bearer token signed with an unknown key")
        }
    }

    @Test func algorithmConfusionAndUnsignedTokensAreRefused() async throws {
        try await TestJWKSServer.with { server in
            let rsa = TestSigningKey(.rs256, kid: "k1")
            server.publish([rsa])
            let authenticator = try authenticator(server)
            #expect(try await authenticator.verify(rsa.token()).userID == "user-42")
            // HS256 keyed with what anyone can read of the public key: its DER, its JWK, its numbers.
            let publicKey = rsa.key.publicKey
            guard case .rsa(let modulus, _) = publicKey.components else { throw TestFailure("not an RSA key") }
            let jwkText = String(decoding: try JSONSerialization.data(withJSONObject: rsa.jwk()), as: UTF8.self)
            for material in [Array(jwkText.utf8), modulus, Array(Base64URL.encode(modulus).utf8)] {
                let confused = TestTokens.token(header: TestTokens.header(alg: "HS256", kid: "k1"), claims: TestTokens.claims()) {
                    HMACSHA256.authenticate(key: material, message: $0)
                }
                #expect(await refusal(authenticator, confused) == "bearer token algorithm is not accepted")
            }
            for alg in ["none", "None", "HS512", "PS256", "RS512", "ES384"] {
                let token = TestTokens.token(header: TestTokens.header(alg: alg, kid: "k1"), claims: TestTokens.claims()) { _ in [] }
                #expect(await refusal(authenticator, token) == "bearer token algorithm is not accepted", "\(alg)")
            }
            let critical = TestTokens.token(header: #"{"alg":"RS256","kid":"k1","crit":["exp"]}"#, claims: TestTokens.claims()) {
                try! rsa.key.signature(for: $0)
            }
            #expect(await refusal(authenticator, critical) != nil)
            #expect(server.fetches == 1)
        }
    }

    @Test func anUnknownKidFetchesTheSetOnceThenIsRefused() async throws {
        try await TestJWKSServer.with { server in
            let known = TestSigningKey(.es256, kid: "known")
            server.publish([known])
            let authenticator = try authenticator(server)
            #expect(try await authenticator.verify(known.token()).userID == "user-42")
            #expect(server.fetches == 1)
            clock.advance(by: 30)
            let stranger = TestSigningKey(.es256, kid: "stranger")
            #expect(await refusal(authenticator, stranger.token()) == "bearer token signed with an unknown key")
            #expect(server.fetches == 2)
            #expect(await refusal(authenticator, stranger.token()) == "bearer token signed with an unknown key")
            #expect(server.fetches == 2)
        }
    }

    @Test func aRotatedKeyIsFoundByOneRefreshAndTheOldOneServesUntilThen() async throws {
        try await TestJWKSServer.with { server in
            let old = TestSigningKey(.rs256, kid: "2024")
            let new = TestSigningKey(.edDSA, kid: "2025")
            server.publish([old])
            let authenticator = try authenticator(server)
            let oldToken = old.token()
            #expect(try await authenticator.verify(oldToken).userID == "user-42")
            server.publish([new])
            // Until the set is fetched again the cached old key serves (no fetch for a known kid).
            #expect(try await authenticator.verify(old.token(sub: "user-43")).userID == "user-43")
            // The new kid, within the interval: no fetch is allowed yet.
            #expect(await refusal(authenticator, new.token()) == "bearer token signed with an unknown key")
            #expect(server.fetches == 1)
            clock.advance(by: 30)
            #expect(try await authenticator.verify(new.token()).userID == "user-42")
            #expect(server.fetches == 2)
            // The old key left the set: even a token verified before is refused now.
            #expect(await refusal(authenticator, oldToken) == "bearer token signed with an unknown key")
            #expect(server.fetches == 2)
        }
    }

    @Test func manyUnknownKidsFetchAtMostOncePerInterval() async throws {
        try await TestJWKSServer.with { server in
            let known = TestSigningKey(.es256, kid: "known")
            server.publish([known])
            let authenticator = try authenticator(server, minimumRefresh: 60)
            #expect(try await authenticator.verify(known.token()).userID == "user-42")
            clock.advance(by: 60)
            let signer = TestSigningKey(.es256, kid: nil)
            let tokens = (0..<40).map { i in
                TestTokens.token(header: TestTokens.header(alg: "ES256", kid: "unknown-\(i)"), claims: TestTokens.claims()) {
                    try! signer.key.signature(for: $0)
                }
            }
            let refusals = await withTaskGroup(of: String?.self) { group in
                for token in tokens { group.addTask { await refusal(authenticator, token) } }
                return await group.reduce(into: [String?]()) { $0.append($1) }
            }
            #expect(refusals.allSatisfy { $0 == "bearer token signed with an unknown key" })
            #expect(server.fetches == 2, "concurrent unknown kids share one fetch")
            clock.advance(by: 59)
            #expect(await refusal(authenticator, tokens[0]) != nil)
            #expect(server.fetches == 2)
            clock.advance(by: 1)
            #expect(await refusal(authenticator, tokens[1]) != nil)
            #expect(server.fetches == 3)
        }
    }

    @Test func aStaleSetIsRefreshedInTheBackgroundAfterItsBoundedMaxAge() async throws {
        try await TestJWKSServer.with { server in
            let key = TestSigningKey(.es256, kid: "k")
            server.publish([key])
            // Below the floor of 5 minutes: the set is kept 5 minutes.
            server.setCacheControl("public, max-age=15")
            let authenticator = try authenticator(server)
            #expect(try await authenticator.verify(key.token(sub: "a")).userID == "a")
            clock.advance(by: 299)
            #expect(try await authenticator.verify(key.token(sub: "b")).userID == "b")
            #expect(server.fetches == 1)
            clock.advance(by: 1)
            // Served from the cached set at once; the fetch runs behind it.
            #expect(try await authenticator.verify(key.token(sub: "c")).userID == "c")
            #expect(await eventually(timeout: 30, every: .milliseconds(20)) { server.fetches == 2 })
        }
    }

    @Test func issuerAudienceAndTimesAreChecked() async throws {
        try await TestJWKSServer.with { server in
            let key = TestSigningKey(.es256, kid: "k")
            server.publish([key])
            let issuer = "https://id.example.com/"
            let authenticator = try authenticator(server, issuer: issuer, audience: "subscriptions-api")
            let iss = #","iss":"\#(issuer)""#
            let accepted = [
                TestTokens.claims(extra: iss + #","aud":"subscriptions-api""#),
                TestTokens.claims(extra: iss + #","aud":["other","subscriptions-api"]"#),
                // Within the minute of leeway.
                TestTokens.claims(expiresIn: -30, extra: iss + #","aud":"subscriptions-api""#),
                TestTokens.claims(extra: iss + #","aud":"subscriptions-api","nbf":\#(Int(Date().timeIntervalSince1970) + 30)"#),
                TestTokens.claims(extra: iss + #","aud":"subscriptions-api","iat":\#(Int(Date().timeIntervalSince1970) + 30)"#),
            ]
            for claims in accepted {
                #expect(await refusal(authenticator, key.token(claims)) == nil, "\(claims)")
            }
            let later = Int(Date().timeIntervalSince1970) + 600
            let refused = [
                (TestTokens.claims(extra: #","iss":"https://evil.example.com/","aud":"subscriptions-api""#), "bearer token from another issuer"),
                (TestTokens.claims(extra: #","aud":"subscriptions-api""#), "bearer token from another issuer"),
                (TestTokens.claims(extra: iss + #","aud":"other""#), "bearer token for another audience"),
                (TestTokens.claims(extra: iss + #","aud":["other"]"#), "bearer token for another audience"),
                (TestTokens.claims(extra: iss), "bearer token for another audience"),
                (TestTokens.claims(expiresIn: -120, extra: iss + #","aud":"subscriptions-api""#), "bearer token expired"),
                (#"{"sub":"u","iss":"\#(issuer)","aud":"subscriptions-api"}"#, "bearer token without exp"),
                (TestTokens.claims(extra: iss + #","aud":"subscriptions-api","nbf":\#(later)"#), "bearer token not yet valid"),
                (TestTokens.claims(extra: iss + #","aud":"subscriptions-api","iat":\#(later)"#), "bearer token issued in the future"),
                (TestTokens.claims(extra: iss + #","aud":"subscriptions-api","iat":"yesterday""#), "bearer token issued in the future"),
            ]
            for (claims, message) in refused {
                #expect(await refusal(authenticator, key.token(claims)) == message, "\(claims)")
            }
        }
    }

    @Test func anUnreachableProviderIsAServiceUnavailableNotABadToken() async throws {
        // A server that listened once: its port is closed now.
        let url = try await TestJWKSServer.with { $0.url }
        let authenticator = try UserAuthenticator(
            settings: UserTokenSettings(jwksURL: url), clock: clock, logger: Logger(label: "test", level: .critical))
        let key = TestSigningKey(.es256, kid: "k")
        do throws(HTTPError) {
            _ = try await authenticator.verify(key.token())
            Issue.record("accepted without keys")
        } catch {
            #expect(error.status == 503 && error.code == "SERVICE_UNAVAILABLE", "\(error)")
        }
    }

    @Test func aFailedFetchKeepsThePreviousKeys() async throws {
        try await TestJWKSServer.with { server in
            let key = TestSigningKey(.rs256, kid: "k")
            server.publish([key])
            let authenticator = try UserAuthenticator(
                settings: UserTokenSettings(jwksURL: server.url), clock: clock, logger: Logger(label: "test", level: .critical))
            #expect(try await authenticator.verify(key.token(sub: "a")).userID == "a")
            server.setStatus(500)
            clock.advance(by: 30)
            #expect(await refusal(authenticator, TestSigningKey(.rs256, kid: "other").token()) == "bearer token signed with an unknown key")
            #expect(server.fetches == 2)
            #expect(try await authenticator.verify(key.token(sub: "b")).userID == "b")
        }
    }

    @Test func theSetKeepsOnlySignatureKeysItsTokensMayUse() throws {
        let rsa = TestSigningKey(.rs256, kid: "rsa")
        let ec = TestSigningKey(.es256, kid: "ec")
        let ed = TestSigningKey(.edDSA, kid: "ed")
        let jwks: [[String: String]] = [
            rsa.jwk(), ec.jwk(), ed.jwk(),
            rsa.jwk(["kid": "enc", "use": "enc"]), rsa.jwk(["kid": "pss", "alg": "PS256"]), ec.jwk(["kid": "lying", "alg": "RS256"]),
            ec.jwk(["kid": "p384", "crv": "P-384"]), ed.jwk(["kid": "x448", "crv": "X448"]), ["kty": "oct", "k": "c2VjcmV0"],
            ec.jwk(["kid": "off-curve", "y": Base64URL.encode([UInt8](repeating: 1, count: 32))]),
            rsa.jwk(["kid": "no-alg", "alg": ""]).filter { $0.key != "alg" },
        ]
        let document = try JSONSerialization.data(withJSONObject: ["keys": jwks])
        let set = try #require(JSONWebKeySet.parse(Array(document)))
        #expect(set.keys.map(\.kid) == ["rsa", "ec", "ed", "no-alg"])
        #expect(set.keys.map(\.algorithm) == [.rs256, .es256, .edDSA, .rs256])
        #expect(set.skipped == jwks.count - 4)
        #expect(JSONWebKeySet.parse(Array(#"{"keys":{}}"#.utf8)) == nil)
        #expect(JSONWebKeySet.parse(Array("[]".utf8)) == nil)
    }

    @Test func cacheControlMaxAgeIsRead() {
        #expect(JSONWebKeySetCache.maxAge("public, max-age=600, must-revalidate") == 600)
        #expect(JSONWebKeySetCache.maxAge("Max-Age=20") == 20)
        #expect(JSONWebKeySetCache.maxAge("no-store") == 0)
        #expect(JSONWebKeySetCache.maxAge("public") == nil)
        #expect(JSONWebKeySetCache.maxAge("max-age=soon") == nil)
    }
}

/// A test precondition that did not hold.
struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
