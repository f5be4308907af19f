import Crypto
import Foundation
import HTTPServer
import ServiceRuntime
import Testing

@testable import IngressApp

/// Bearer tokens verified with one public key (ES256, RS256, EdDSA) or with HS256 secrets chosen
/// by `kid`, the algorithm confusions a key-based deployment must refuse, and the settings that
/// choose the method.
@Suite struct UserTokenTests {
    static func pem(_ key: PublicKey) -> String {
        let der = Data(key.derRepresentation).base64EncodedString(options: [.lineLength64Characters])
        return "-----BEGIN PUBLIC KEY-----\n\(der)\n-----END PUBLIC KEY-----\n"
    }

    /// The 401 message of a refused token, or nil when it was accepted.

    @Test(arguments: JWSAlgorithm.allCases)
    func tokensFromTheConfiguredKeyAreAccepted(_ algorithm: JWSAlgorithm) async throws {
        let key = TestSigningKey(algorithm, kid: "ignored")
        let authenticator = try UserAuthenticator(settings: UserTokenSettings(publicKeyPEM: Self.pem(key.key.publicKey)))
        #expect(try await authenticator.verify(key.token()) == AuthenticatedUser(userID: "user-42"))
        // The key is the key: whatever kid the token names.
        let unnamed = TestSigningKey(algorithm, kid: nil)
        #expect(await refusal(authenticator, unnamed.token()) == "bearer token signature is invalid")
    }

    @Test func otherKeysAlgorithmsAndExpiredTokensAreRefused() async throws {
        let key = TestSigningKey(.es256, kid: nil)
        let pem = Self.pem(key.key.publicKey)
        let authenticator = try UserAuthenticator(settings: UserTokenSettings(publicKeyPEM: pem))
        #expect(await refusal(authenticator, TestSigningKey(.es256, kid: nil).token()) == "bearer token signature is invalid")
        // HS256 keyed with the public key's text or DER: the classic confusion of key-based verifiers.
        for material in [Array(pem.utf8), key.key.publicKey.derRepresentation] {
            let confused = TestTokens.token(header: TestTokens.header(alg: "HS256"), claims: TestTokens.claims()) {
                HMACSHA256.authenticate(key: material, message: $0)
            }
            #expect(await refusal(authenticator, confused) == "bearer token algorithm is not accepted")
        }
        // Another public-key algorithm than the key's own.
        let edToken = TestSigningKey(.edDSA, kid: nil).token()
        #expect(await refusal(authenticator, edToken) == "bearer token algorithm is not accepted")
        let unsigned = TestTokens.token(header: TestTokens.header(alg: "none"), claims: TestTokens.claims()) { _ in [] }
        #expect(await refusal(authenticator, unsigned) == "bearer token algorithm is not accepted")
        #expect(await refusal(authenticator, key.token(#"{"sub":"user-42","exp":1000}"#)) == "bearer token expired")
        let anonymous = key.token(#"{"exp":\#(Int(Date().timeIntervalSince1970) + 600)}"#)
        #expect(await refusal(authenticator, anonymous) == "bearer token without a subject")
    }

    @Test func hs256SecretsAreChosenByKidForRotation() async throws {
        let (old, current) = (Base64URL.encode(SecureRandom.bytes(32)), Base64URL.encode(SecureRandom.bytes(32)))
        let settings = try Self.settings(["USER_TOKEN_HS256_SECRETS": "2024:\(old),2025:\(current)"])
        let authenticator = try UserAuthenticator(settings: settings)
        #expect(await refusal(authenticator, TestTokens.hs256(current, kid: "2025")) == nil)
        #expect(await refusal(authenticator, TestTokens.hs256(old, kid: "2024")) == nil)
        // The kid picks the secret: the other one does not verify it.
        #expect(await refusal(authenticator, TestTokens.hs256(old, kid: "2025")) == "bearer token signature is invalid")
        #expect(await refusal(authenticator, TestTokens.hs256(current, kid: "2026")) == "bearer token signed with an unknown key")
        // Without a kid, each secret is tried.
        #expect(await refusal(authenticator, TestTokens.hs256(old)) == nil)
        #expect(await refusal(authenticator, TestTokens.hs256(current)) == nil)
        #expect(await refusal(authenticator, TestTokens.hs256(Base64URL.encode(SecureRandom.bytes(32)))) == "bearer token signature is invalid")
        let es256 = TestSigningKey(.es256, kid: "2025").token()
        #expect(await refusal(authenticator, es256) == "bearer token algorithm is not accepted")
    }

    @Test func theSingleSecretKeepsWorkingBesideNamedOnes() async throws {
        let (single, named) = (Base64URL.encode(SecureRandom.bytes(32)), Base64URL.encode(SecureRandom.bytes(32)))
        let alone = try UserAuthenticator(settings: Self.settings(["USER_TOKEN_HS256_SECRET": single]))
        // As before kids existed: a kid in the header does not stop the one secret.
        #expect(await refusal(alone, TestTokens.hs256(single, kid: "anything")) == nil)
        let both = try UserAuthenticator(
            settings: Self.settings(["USER_TOKEN_HS256_SECRET": single, "USER_TOKEN_HS256_SECRETS": "new:\(named)"]))
        #expect(await refusal(both, TestTokens.hs256(single)) == nil)
        #expect(await refusal(both, TestTokens.hs256(named, kid: "new")) == nil)
        #expect(await refusal(both, TestTokens.hs256(single, kid: "new")) == "bearer token signature is invalid")
    }

    /// The settings of `environment`, which must be valid.
    static func settings(_ environment: [String: String]) throws -> UserTokenSettings {
        let reader = ConfigurationReader(environment: environment)
        let settings = UserTokenSettings(reader: reader)
        try reader.validate()
        return settings
    }

    /// The names of the variables `environment` is refused for.
    static func problems(_ environment: [String: String]) -> [String] {
        let reader = ConfigurationReader(environment: environment)
        _ = UserTokenSettings(reader: reader)
        return reader.problems.map(\.name)
    }

    @Test func exactlyOneVerificationMethodIsConfigured() throws {
        let secret = String(repeating: "s", count: 32)
        #expect(Self.problems([:]) == ["USER_TOKEN_JWKS_URL"])
        #expect(Self.problems(["USER_TOKEN_HS256_SECRET": secret, "USER_TOKEN_JWKS_URL": "https://id.example.com/jwks"]) == ["USER_TOKEN_JWKS_URL"])
        #expect(
            Self.problems(["USER_TOKEN_HS256_SECRETS": "a:\(secret)", "USER_TOKEN_JWKS_URL": "https://id.example.com/jwks"])
                == ["USER_TOKEN_JWKS_URL"])
        #expect(Self.problems(["USER_TOKEN_JWKS_URL": "http://id.example.com/jwks"]) == ["USER_TOKEN_JWKS_URL"])
        #expect(Self.problems(["USER_TOKEN_JWKS_URL": "ftp://127.0.0.1/jwks"]) == ["USER_TOKEN_JWKS_URL"])
        #expect(Self.problems(["USER_TOKEN_JWKS_URL": "http://127.0.0.1:8000/jwks"]).isEmpty)
        #expect(Self.problems(["USER_TOKEN_JWKS_URL": "http://localhost/jwks"]).isEmpty)
        #expect(
            Self.problems(["USER_TOKEN_JWKS_URL": "https://id.example.com/jwks", "USER_TOKEN_JWKS_MIN_REFRESH_SECONDS": "0"])
                == ["USER_TOKEN_JWKS_MIN_REFRESH_SECONDS"])
        #expect(Self.problems(["USER_TOKEN_HS256_SECRETS": "a:short"]) == ["USER_TOKEN_HS256_SECRETS"])
        #expect(Self.problems(["USER_TOKEN_HS256_SECRETS": "a:\(secret),a:\(secret)x"]) == ["USER_TOKEN_HS256_SECRETS"])
        #expect(Self.problems(["USER_TOKEN_HS256_SECRETS": "\(secret)"]) == ["USER_TOKEN_HS256_SECRETS"])
        let settings = try Self.settings([
            "USER_TOKEN_JWKS_URL": "https://id.example.com/.well-known/jwks.json", "USER_TOKEN_ISSUER": "https://id.example.com/",
            "USER_TOKEN_AUDIENCE": "api",
        ])
        #expect(settings.jwksMinimumRefreshInterval == 30)
        #expect(settings.issuer == "https://id.example.com/" && settings.audience == "api")
        #expect(settings.hs256Secrets.isEmpty && settings.publicKeyPEM == nil)
    }
}

/// Why `authenticator` refuses `token` (the 401's message), or nil when it accepts it.
func refusal(_ authenticator: UserAuthenticator, _ token: String) async -> String? {
    do throws(HTTPError) {
        _ = try await authenticator.verify(token)
        return nil
    } catch {
        #expect(error.status == 401 && error.code == "UNAUTHORIZED", "\(error)")
        return error.message
    }
}
