import Crypto
import Foundation
import Testing

@Suite struct KeyTests {
    let key = P256PrivateKey.generate()
    let message = Array("header.payload".utf8)

    @Test func signaturesVerifyWithTheMatchingKeyOnly() throws {
        let signature = try key.signature(for: message)
        #expect(signature.count == 64)
        #expect(key.publicKey.isValidSignature(signature, for: message))
        #expect(!key.publicKey.isValidSignature(signature, for: message + [0]))
        #expect(!P256PrivateKey.generate().publicKey.isValidSignature(signature, for: message))
    }

    @Test func everyFlippedSignatureBitIsRejected() throws {
        let signature = try key.signature(for: message)
        for index in signature.indices {
            var tampered = signature
            tampered[index] ^= 0x80
            #expect(!key.publicKey.isValidSignature(tampered, for: message))
        }
    }

    @Test func rawSignaturesOnlyExactly64Bytes() throws {
        let signature = try key.signature(for: message)
        #expect(!key.publicKey.isValidSignature(Array(signature.prefix(63)), for: message))
        #expect(!key.publicKey.isValidSignature(signature + [0], for: message))
        #expect(!key.publicKey.isValidSignature([0] + signature, for: message))
        #expect(!key.publicKey.isValidSignature([], for: message))
        #expect(!key.publicKey.isValidSignature([UInt8](repeating: 0, count: 64), for: message))
    }

    @Test func pkcs8PEMRoundTrips() throws {
        let pem = key.pemPKCS8()
        #expect(pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let reloaded = try P256PrivateKey(pem: pem)
        #expect(reloaded.publicKey.derRepresentation == key.publicKey.derRepresentation)
        #expect(key.publicKey.isValidSignature(try reloaded.signature(for: message), for: message))
    }

    @Test func refusesNonKeysAndOtherKeyTypes() {
        #expect(throws: CryptoError.self) { try P256PrivateKey(pem: "not a key") }
        #expect(throws: CryptoError.self) { try P256PublicKey(pem: Self.rsaPublicKeyPEM) }
        #expect(throws: CryptoError.self) { try P256PublicKey(derSubjectPublicKeyInfo: [0x30, 0x00]) }
        #expect(throws: CryptoError.self) { try P256PublicKey(derSubjectPublicKeyInfo: key.publicKey.derRepresentation + [0]) }
    }

    @Test func generalPublicKeyChecksES256() throws {
        let der = key.publicKey.derRepresentation
        let general = try PublicKey(derSubjectPublicKeyInfo: der)
        #expect(general.algorithm == .es256)
        let signature = try key.signature(for: message)
        #expect(general.isValidSignature(signature, for: message, algorithm: .es256))
        #expect(!general.isValidSignature(signature, for: message, algorithm: .rs256))
        let pem =
            "-----BEGIN PUBLIC KEY-----\n" + Data(der).base64EncodedString(options: .lineLength64Characters)
            + "\n-----END PUBLIC KEY-----\n"
        #expect(try P256PublicKey(pem: pem).isValidSignature(signature, for: message))
    }

    @Test func generalPublicKeyChecksRS256() throws {
        let key = try PublicKey(pem: Self.rsaPublicKeyPEM)
        #expect(key.algorithm == .rs256)
        let signature = try #require(Data(base64Encoded: Self.rsaSignature).map { [UInt8]($0) })
        let message = Array("signed by RS256".utf8)
        #expect(key.isValidSignature(signature, for: message, algorithm: .rs256))
        #expect(!key.isValidSignature(signature, for: message + [0], algorithm: .rs256))
        #expect(!key.isValidSignature(signature, for: message, algorithm: .es256))
    }

    @Test func keysAreUsableFromManyThreadsAtOnce() async throws {
        let signature = try key.signature(for: message)
        let publicKey = key.publicKey
        let message = message
        let results = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<64 { group.addTask { publicKey.isValidSignature(signature, for: message) } }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(results.count == 64 && results.allSatisfy { $0 })
    }

    /// A throwaway RSA-2048 key made for this test with `openssl genpkey`, and its PKCS#1 v1.5
    /// SHA-256 signature of "signed by RS256" (`openssl dgst -sha256 -sign`).
    static let rsaPublicKeyPEM = """
        -----BEGIN PUBLIC KEY-----
        MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAttEN6S3LeWZctR108Li9
        tlBAzjjAxSzQbc0SjtettYTPXIckRxFfYLio8cDFXEI+yHAe9mKSV5/hg2Eez5IO
        2nUV3ySaU3M5ZvXZgzxLkD2xfJRt9QkD0gRDWU7HeX7/929CYtGQUcN6cW26YCr+
        PUIiW1ho2LbKf4N6XXw+/aVo74RQlkoeUgaqUZ2ogNKX5TNulMC7zTLnfdoqi/aW
        gE3hhllpmFtNHijm48GcdIXOB2D6pZz19OBwZL/J3HqcrclXVgOGClRNt79m+LKs
        NlBVDT/om+yeE1XbYAqJaDldSci00lJ5dPKgG/1ljAPeLdMdTOTrwYTP/TTJwB9u
        vwIDAQAB
        -----END PUBLIC KEY-----
        """
    static let rsaSignature = """
        WS5sjf9KlK8dFuzuyIK/7TiZHgI//Cp8FhJUAmPwbEEYMA35j1fBOyed7fcBMizlI9zYHZ8LBRw+yfBf2pYggI6mOo6QgKt4GqQjq/Wo1P/hmJsTFlscAmbqz\
        WOlexZzeN80Zzh18pJYzMg4BJ086kHwDYh3hNvHxJTntY7olP98zw2/sFbWVTE60m/77zJQ5U9Uwb8woswjmUeLahCINIGZWIIqH99XVZshLf9+kbE+dosoIup7\
        fnptovR4avY1RUDwpC7dSwppENdXIYPgmaDp9EOZePM+5MvvvJ6e7Lts/ZXzG+cTpOXDjCS1KypA5LIUBuHk4orJNaSGsLgQtA==
        """
}
