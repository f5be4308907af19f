import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import ServiceRuntime
import Testing

/// Each tampered or foreign form of signed data is refused with its own code.
@Suite struct TamperTests {
    let signer: TestAppleSigner
    let verifier: SignedDataVerifier
    let transaction: JWSTransactionDecodedPayload
    let token: String

    init() throws {
        signer = try TestAppleSigner()
        verifier = try makeVerifier(trusting: signer)
        transaction = TestPayloads.transaction(bundleId: "com.example.app", environment: .sandbox)
        token = try signer.sign(transaction)
    }

    func code(_ token: String, expecting environment: AppStoreEnvironment? = nil, with verifier: SignedDataVerifier? = nil)
        async -> VerificationError.Code?
    {
        do {
            _ = try await (verifier ?? self.verifier).verifyTransaction(token, expectedEnvironment: environment)
            return nil
        } catch { return error.code }
    }

    @Test func theUntamperedTokenVerifies() async throws {
        #expect(try await verifier.verifyTransaction(token) == transaction)
    }

    @Test func aChangedPayloadByteBreaksTheSignature() async {
        let tampered = TokenSurgery.editingPayload(token) { $0.replacingOccurrences(of: "\"USD\"", with: "\"USE\"") }
        #expect(tampered != token)
        #expect(await code(tampered) == .invalidSignature)
    }

    @Test func everyChangedSignatureByteBreaksTheSignature() async {
        for index in 0..<64 {
            #expect(
                await code(
                    TokenSurgery.editingSignature(token) {
                        var s = $0
                        s[index] ^= 0x01
                        return s
                    }) == .invalidSignature)
        }
    }

    @Test func signaturesOfTheWrongShapeAreRefused() async throws {
        #expect(await code(TokenSurgery.editingSignature(token) { Array($0.prefix(63)) }) == .invalidSignature)
        #expect(await code(TokenSurgery.editingSignature(token) { $0 + [0] }) == .invalidSignature)
        #expect(await code(TokenSurgery.replacing(token, segment: 2, with: "")) == .invalidSignature)
        // The same signature in DER form (what OpenSSL produces) is not a JWS signature.
        let der = try #require(Self.der(fromRaw: Base64URL.decode(TokenSurgery.segments(token)[2])!))
        #expect(await code(TokenSurgery.replacing(token, segment: 2, with: Base64URL.encode(der))) == .invalidSignature)
    }

    @Test func reorderedOrSwappedCertificatesAreRefused() async throws {
        let (leaf, intermediate, root) = (signer.x5c[0], signer.x5c[1], signer.x5c[2])
        for order in [
            [intermediate, leaf, root], [leaf, root, intermediate], [root, intermediate, leaf], [leaf, leaf, root],
            [leaf, intermediate, intermediate], [leaf, intermediate, leaf],
        ] {
            let reordered = try signer.sign(transaction, header: TestJWSHeader(x5c: order))
            #expect(await code(reordered) == .invalidChain)
        }
        // Another genuine leaf under the same root did not make this signature.
        let other = try signer.variant(TestAppleSigner.Options())
        let swappedLeaf = TokenSurgery.replacing(
            try other.sign(transaction), segment: 2, with: TokenSurgery.segments(token)[2])
        #expect(await code(swappedLeaf) == .invalidSignature)
    }

    @Test func theCertificateCountMustBeThree() async throws {
        for x5c in [nil, [], [signer.x5c[0]], Array(signer.x5c.prefix(2)), signer.x5c + [signer.x5c[2]]] {
            #expect(await code(try signer.sign(transaction, header: TestJWSHeader(x5c: x5c))) == .invalidChain)
        }
        let garbage = [signer.x5c[0], "not base64!", signer.x5c[2]]
        #expect(await code(try signer.sign(transaction, header: TestJWSHeader(x5c: garbage))) == .invalidChain)
        let notACertificate = [signer.x5c[0], Data("hello".utf8).base64EncodedString(), signer.x5c[2]]
        #expect(await code(try signer.sign(transaction, header: TestJWSHeader(x5c: notACertificate))) == .invalidChain)
    }

    @Test func selfMadeChainsAreRefusedWithOrWithoutTheOIDs() async throws {
        let withOIDs = try TestAppleSigner()
        let withoutOIDs = try TestAppleSigner(options: .init(leafHasAppleOID: false, intermediateHasAppleOID: false))
        for stranger in [withOIDs, withoutOIDs] {
            #expect(await code(try stranger.sign(transaction)) == .invalidChain)
            // Presenting the trusted root as x5c[2] does not make the stranger's chain end there.
            let borrowedRoot = [stranger.x5c[0], stranger.x5c[1], signer.x5c[2]]
            #expect(await code(try stranger.sign(transaction, header: TestJWSHeader(x5c: borrowedRoot))) == .invalidChain)
        }
    }

    @Test func theTrustedRootStillNeedsAppleOIDs() async throws {
        let noLeafOID = try signer.variant(.init(leafHasAppleOID: false))
        let noIntermediateOID = try signer.variant(.init(intermediateHasAppleOID: false))
        for variant in [noLeafOID, noIntermediateOID] {
            let error = await #expect(throws: VerificationError.self) { try await verifier.verifyTransaction(try variant.sign(transaction)) }
            #expect(error?.code == .invalidChain)
            #expect(error?.reason.contains("OID") == true)
        }
    }

    @Test func x5cMustNameTheRootTheChainEndsIn() async throws {
        _ = try await verifier.verifyTransaction(token)  // warm the cache for this leaf and intermediate
        let otherRoot = try TestAppleSigner().x5c[2]
        let wrongTop = [signer.x5c[0], signer.x5c[1], otherRoot]
        #expect(await code(try signer.sign(transaction, header: TestJWSHeader(x5c: wrongTop))) == .invalidChain)
        let cold = try makeVerifier(trusting: signer)
        #expect(await code(try signer.sign(transaction, header: TestJWSHeader(x5c: wrongTop)), with: cold) == .invalidChain)
    }

    @Test func certificatesAreCheckedAtTheSignedDate() async throws {
        let now = Date()
        let expired = try signer.variant(.init(leafValidity: (now - 60 * 86400)...(now - 30 * 86400)))
        var stale = transaction
        stale.signedDate = now
        #expect(await code(try expired.sign(stale)) == .invalidChain)
        // Signed while the leaf was valid: accepted, as Apple's library does with online checks off.
        stale.signedDate = now - 45 * 86400
        #expect(await code(try expired.sign(stale)) == nil)
        // The cached chain does not stretch the leaf's validity to a later signedDate.
        stale.signedDate = now - 10 * 86400
        #expect(await code(try expired.sign(stale)) == .invalidChain)
        let notYetValid = try signer.variant(.init(leafValidity: (now + 86400)...(now + 30 * 86400)))
        stale.signedDate = now
        #expect(await code(try notYetValid.sign(stale)) == .invalidChain)
    }

    @Test func onlyES256IsAccepted() async throws {
        for alg in [nil, "none", "HS256", "ES384", "RS256", "PS256", "EdDSA", "es256"] as [String?] {
            #expect(await code(try signer.sign(transaction, header: TestJWSHeader(alg: alg, x5c: signer.x5c))) == .invalidSignature)
        }
        // "alg": "none" without any signature.
        let unsigned = TokenSurgery.replacing(
            try signer.sign(transaction, header: TestJWSHeader(alg: "none", x5c: signer.x5c)), segment: 2, with: "")
        #expect(await code(unsigned) == .invalidSignature)
    }

    @Test func hs256WithThePublicKeyAsSecretIsRefused() async throws {
        let header = Base64URL.encode(Array(#"{"alg":"HS256","x5c":["\#(signer.x5c.joined(separator: "\",\""))"]}"#.utf8))
        let signingInput = header + "." + TokenSurgery.segments(token)[1]
        for secret in [signer.leaf.publicKey!.derRepresentation, signer.leaf.der, Array(signer.leaf.pem.utf8)] {
            let mac = HMACSHA256.authenticate(key: secret, message: Array(signingInput.utf8))
            #expect(await code(signingInput + "." + Base64URL.encode(mac)) == .invalidSignature)
        }
    }

    @Test func criticalHeaderParametersAreRefused() async throws {
        let token = try signer.sign(transaction, header: TestJWSHeader(x5c: signer.x5c, crit: ["exp"]))
        #expect(await code(token) == .invalidSignature)
    }

    @Test func anotherAppIsRefused() async throws {
        var foreign = transaction
        foreign.bundleId = "com.example.other"
        #expect(await code(try signer.sign(foreign)) == .invalidApp)
        foreign.bundleId = nil
        #expect(await code(try signer.sign(foreign)) == .invalidApp)
        // A notification is not a transaction: decoded as one, it names no app.
        let notification = try signer.signNotification(
            type: .test, bundleId: "com.example.app", environment: .sandbox)
        #expect(await code(notification) == .invalidApp)
    }

    @Test func appAppleIdIsCheckedForProductionOnly() async throws {
        let production = try makeVerifier(trusting: signer, environment: .production, appAppleId: 1234)
        for (appAppleId, expected) in [(1234, nil), (9999, VerificationError.Code.invalidApp)] as [(Int64, VerificationError.Code?)] {
            let token = try signer.signNotification(
                type: .didRenew, bundleId: "com.example.app", appAppleId: appAppleId, environment: .production)
            #expect(await Self.notificationCode(token, production) == expected)
        }
        let missing = try signer.signNotification(type: .didRenew, bundleId: "com.example.app", environment: .production)
        #expect(await Self.notificationCode(missing, production) == .invalidApp)
        // Sandbox data carries no (or any) appAppleId.
        let sandbox = try signer.signNotification(
            type: .didRenew, bundleId: "com.example.app", appAppleId: 9999, environment: .sandbox)
        #expect(await Self.notificationCode(sandbox, production, expecting: .sandbox) == nil)
    }

    @Test func environmentsMustMatchTheExpectedOne() async throws {
        let production = try makeVerifier(trusting: signer, environment: .production)
        var productionTransaction = transaction
        productionTransaction.environment = .production
        let productionToken = try signer.sign(productionTransaction)
        #expect(await code(productionToken, with: production) == nil)
        #expect(await code(productionToken, expecting: .sandbox, with: production) == .invalidEnvironment)
        #expect(await code(token, with: production) == .invalidEnvironment)  // Sandbox data where Production is expected
        #expect(await code(token, expecting: .sandbox, with: production) == nil)  // the sandbox endpoint of a Production deployment
        // A Sandbox deployment never takes Production data, not even when asked to.
        #expect(await code(productionToken) == .invalidEnvironment)
        #expect(await code(productionToken, expecting: .production) == .invalidEnvironment)
        var unknown = transaction
        unknown.rawEnvironment = "Staging"
        #expect(await code(try signer.sign(unknown)) == .invalidEnvironment)
    }

    @Test func xcodeDataIsRefusedUnlessAllowed() async throws {
        var local = transaction
        local.environment = .xcode
        let localToken = try signer.sign(local)
        #expect(await code(localToken) == .invalidEnvironment)
        #expect(await code(localToken, expecting: .xcode) == .invalidEnvironment)
        let allowing = try makeVerifier(trusting: signer, allowXcode: true)
        #expect(await code(localToken, expecting: .xcode, with: allowing) == nil)
        #expect(await code(localToken, with: allowing) == .invalidEnvironment)  // not where Sandbox is expected
        local.environment = .localTesting
        #expect(await code(try signer.sign(local), expecting: .localTesting, with: allowing) == nil)
    }

    @Test func malformedTokensAreRefused() async throws {
        let parts = TokenSurgery.segments(token)
        let malformed = [
            "", ".", "..", "...", "abc", parts[0] + "." + parts[1],
            token + ".", token + "." + parts[2], token + ".e30.e30",
            TokenSurgery.replacing(token, segment: 1, with: parts[1] + "="),
            TokenSurgery.replacing(token, segment: 1, with: parts[1].replacingOccurrences(of: "-", with: "+")),
            TokenSurgery.replacing(token, segment: 0, with: "*" + parts[0]),
            TokenSurgery.replacing(token, segment: 0, with: Base64URL.encode(Array("not json".utf8))),
            TokenSurgery.replacing(token, segment: 0, with: Base64URL.encode(Array("[1,2]".utf8))),
            TokenSurgery.replacing(token, segment: 1, with: ""),
            " " + token, token + "\n",
        ]
        for text in malformed where text != token {
            #expect(await code(text) == .malformed, "\(text.prefix(40))")
        }
        let notJSON = try signer.sign(payload: Array("not json".utf8))
        #expect(await code(notJSON) == .malformed)
        let wrongTypes = try signer.sign(payload: Array(#"{"signedDate":"yesterday"}"#.utf8))
        #expect(await code(wrongTypes) == .malformed)
    }

    @Test func aTenMegabyteTokenIsRefusedUnread() async {
        let huge = TokenSurgery.replacing(token, segment: 1, with: String(repeating: "A", count: 10 * 1024 * 1024))
        #expect(await code(huge) == .malformed)
    }

    @Test func nestedInfosVerifyOnRequest() async throws {
        let renewal = TestPayloads.renewalInfo(environment: .sandbox, originalTransactionId: transaction.originalTransactionId!)
        let token = try signer.signNotification(
            type: .subscribed, subtype: .initialBuy, bundleId: "com.example.app", environment: .sandbox,
            transaction: transaction, renewalInfo: renewal)
        let notification = try await verifier.verifyNotification(token)
        #expect(notification.notificationType == .subscribed && notification.subtype == .initialBuy)
        #expect(try await verifier.verifyTransaction(try #require(notification.data?.signedTransactionInfo)) == transaction)
        #expect(try await verifier.verifyRenewalInfo(try #require(notification.data?.signedRenewalInfo)) == renewal)
    }

    @Test func verificationIsSafeFromManyThreads() async throws {
        let verifier = self.verifier
        let token = self.token
        let expected = transaction
        let results = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<16 {
                group.addTask {
                    for _ in 0..<20 where (try? await verifier.verifyTransaction(token)) != expected { return false }
                    return true
                }
            }
            return await group.reduce(into: [Bool]()) { $0.append($1) }
        }
        #expect(results == Array(repeating: true, count: 16))
    }

    static func notificationCode(
        _ token: String, _ verifier: SignedDataVerifier, expecting environment: AppStoreEnvironment? = nil
    ) async -> VerificationError.Code? {
        do {
            _ = try await verifier.verifyNotification(token, expectedEnvironment: environment)
            return nil
        } catch { return error.code }
    }

    /// DER `ECDSA-Sig-Value` of a raw r||s (each INTEGER minimal, positive).
    static func der(fromRaw raw: [UInt8]) -> [UInt8]? {
        guard raw.count == 64 else { return nil }
        func integer(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
            var value = Array(bytes.drop { $0 == 0 })
            if value.isEmpty || value[0] & 0x80 != 0 { value.insert(0, at: 0) }
            return [0x02, UInt8(value.count)] + value
        }
        let body = integer(raw[0..<32]) + integer(raw[32..<64])
        return [0x30, UInt8(body.count)] + body
    }
}
