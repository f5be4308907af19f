import Crypto
import Foundation
import Testing

@testable import IngressApp

/// Bearer tokens verified with an identity provider's public key (ES256), and the algorithm
/// confusions a key-based deployment must refuse.
@Suite struct UserTokenTests {
    let key = P256PrivateKey.generate()

    var publicKeyPEM: String {
        let der = Data(key.publicKey.derRepresentation).base64EncodedString(options: [.lineLength64Characters])
        return "-----BEGIN PUBLIC KEY-----\n\(der)\n-----END PUBLIC KEY-----\n"
    }

    func token(alg: String, claims: String, sign: ([UInt8]) throws -> [UInt8]) rethrows -> String {
        let header = Base64URL.encode(Array(#"{"alg":"\#(alg)","typ":"JWT"}"#.utf8))
        let payload = Base64URL.encode(Array(claims.utf8))
        let input = "\(header).\(payload)"
        return "\(input).\(Base64URL.encode(try sign(Array(input.utf8))))"
    }

    var validClaims: String { #"{"sub":"user-42","exp":\#(Int(Date().timeIntervalSince1970) + 600)}"# }

    @Test func es256TokensFromTheConfiguredKeyAreAccepted() throws {
        let authenticator = try UserAuthenticator(settings: UserTokenSettings(publicKeyPEM: publicKeyPEM))
        let jwt = try token(alg: "ES256", claims: validClaims) { try key.signature(for: $0) }
        #expect(try authenticator.verify(jwt) == AuthenticatedUser(userID: "user-42"))
    }

    @Test func otherKeysAlgorithmsAndExpiredTokensAreRefused() throws {
        let authenticator = try UserAuthenticator(settings: UserTokenSettings(publicKeyPEM: publicKeyPEM))
        let stranger = P256PrivateKey.generate()
        let forged = try token(alg: "ES256", claims: validClaims) { try stranger.signature(for: $0) }
        #expect(throws: (any Error).self) { try authenticator.verify(forged) }
        // HS256 keyed with the public key's text: the classic confusion of key-based verifiers.
        let confused = token(alg: "HS256", claims: validClaims) {
            HMACSHA256.authenticate(key: Array(publicKeyPEM.utf8), message: $0)
        }
        #expect(throws: (any Error).self) { try authenticator.verify(confused) }
        let unsigned = token(alg: "none", claims: validClaims) { _ in [] }
        #expect(throws: (any Error).self) { try authenticator.verify(unsigned) }
        let expired = try token(alg: "ES256", claims: #"{"sub":"user-42","exp":1000}"#) { try key.signature(for: $0) }
        #expect(throws: (any Error).self) { try authenticator.verify(expired) }
        let anonymous = try token(alg: "ES256", claims: #"{"exp":\#(Int(Date().timeIntervalSince1970) + 600)}"#) {
            try key.signature(for: $0)
        }
        #expect(throws: (any Error).self) { try authenticator.verify(anonymous) }
    }
}
