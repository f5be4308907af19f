import Crypto
import DemoSigner
import Foundation
import Testing

@Suite struct OCSPTests {
    let chain: TestChain
    let trust: X509ChainVerifier

    init() throws {
        chain = try TestChain()
        trust = try X509ChainVerifier(trustedRoots: [chain.root])
    }

    func answer(
        _ request: OCSPRequest, status: TestOCSPStatus, thisUpdate: Date = Date(), nextUpdate: Date? = Date() + 3600
    ) throws -> [UInt8] {
        try TestOCSPResponder.response(
            to: request.der, issuer: request.issuer, issuerKey: chain.intermediateKey, status: status,
            thisUpdate: thisUpdate, nextUpdate: nextUpdate)
    }

    @Test func aGoodAnswerFromTheIssuerChecks() throws {
        let request = try OCSPRequest(certificate: chain.leaf, issuer: chain.intermediate)
        let now = Date()
        let result = try request.check(responseDER: answer(request, status: .good, thisUpdate: now, nextUpdate: now + 600), trust: trust, now: now)
        #expect(result.status == .good)
        #expect(abs(result.nextUpdate!.timeIntervalSince(now + 600)) < 1)
        // The intermediate, answered by the root.
        let upper = try OCSPRequest(certificate: chain.intermediate, issuer: chain.root)
        let upperAnswer = try TestOCSPResponder.response(to: upper.der, issuer: chain.root, issuerKey: chain.rootKey, status: .good)
        #expect(try upper.check(responseDER: upperAnswer, trust: trust, now: now).status == .good)
    }

    @Test func revokedAndUnknownAreResultsNotErrors() throws {
        let request = try OCSPRequest(certificate: chain.leaf, issuer: chain.intermediate)
        let revoked = try request.check(responseDER: answer(request, status: .revoked), trust: trust, now: Date())
        guard case .revoked(let date) = revoked.status else {
            Issue.record("not revoked: \(revoked)")
            return
        }
        #expect(date != nil)
        #expect(try request.check(responseDER: answer(request, status: .unknown), trust: trust, now: Date()).status == .unknown)
    }

    @Test func anAnswerSignedByAnotherKeyIsRefused() throws {
        let request = try OCSPRequest(certificate: chain.leaf, issuer: chain.intermediate)
        // An impostor CA with the issuer's name but its own key.
        let impostorKey = P256PrivateKey.generate()
        let impostor = try TestCertificateIssuer.selfSigned(
            TestCertificateSpec(commonName: "Test Intermediate", notBefore: Date() - 60, notAfter: Date() + 86400, isCA: true),
            key: impostorKey)
        let forged = try TestOCSPResponder.response(to: request.der, issuer: impostor, issuerKey: impostorKey, status: .good)
        let error = #expect(throws: CryptoError.self) { try request.check(responseDER: forged, trust: trust, now: Date()) }
        #expect(error?.code == .chainVerificationFailed)
        // Signed by the root, which is not the leaf's issuer nor a delegated responder.
        let byRoot = try TestOCSPResponder.response(to: request.der, issuer: chain.root, issuerKey: chain.rootKey, status: .good)
        #expect(throws: CryptoError.self) { try request.check(responseDER: byRoot, trust: trust, now: Date()) }
        // Trusting another root, the genuine answer does not verify either.
        let other = try X509ChainVerifier(trustedRoots: [TestChain().root])
        #expect(throws: CryptoError.self) { try request.check(responseDER: answer(request, status: .good), trust: other, now: Date()) }
    }

    @Test func anAnswerAboutAnotherCertificateIsRefused() throws {
        let request = try OCSPRequest(certificate: chain.leaf, issuer: chain.intermediate)
        let otherLeaf = try TestCertificateIssuer.issue(
            TestCertificateSpec(commonName: "Other Leaf", notBefore: Date() - 60, notAfter: Date() + 86400, isCA: false),
            subjectKey: P256PrivateKey.generate().publicKey, issuer: chain.intermediate, issuerKey: chain.intermediateKey)
        let otherRequest = try OCSPRequest(certificate: otherLeaf, issuer: chain.intermediate)
        let error = #expect(throws: CryptoError.self) {
            try request.check(responseDER: answer(otherRequest, status: .good), trust: trust, now: Date())
        }
        #expect(error?.reason.contains("no status") == true)
    }

    @Test func staleOrFutureAnswersAreRefused() throws {
        let request = try OCSPRequest(certificate: chain.leaf, issuer: chain.intermediate)
        let now = Date()
        let expired = try answer(request, status: .good, thisUpdate: now - 7200, nextUpdate: now - 3600)
        #expect(throws: CryptoError.self) { try request.check(responseDER: expired, trust: trust, now: now) }
        let future = try answer(request, status: .good, thisUpdate: now + 3600, nextUpdate: now + 7200)
        #expect(throws: CryptoError.self) { try request.check(responseDER: future, trust: trust, now: now) }
        // Without nextUpdate an answer is current when made.
        let open = try answer(request, status: .good, thisUpdate: now - 60, nextUpdate: nil)
        #expect(try request.check(responseDER: open, trust: trust, now: now).nextUpdate == nil)
    }

    @Test func unsuccessfulOrMalformedResponsesAreRefused() throws {
        let request = try OCSPRequest(certificate: chain.leaf, issuer: chain.intermediate)
        for body in [try TestOCSPResponder.failure(status: 3), [], [0x30, 0x03, 0x0A, 0x01], Array("garbage".utf8)] {
            #expect(throws: CryptoError.self) { try request.check(responseDER: body, trust: trust, now: Date()) }
        }
        let good = try answer(request, status: .good)
        #expect(throws: CryptoError.self) { try request.check(responseDER: good + [0], trust: trust, now: Date()) }
    }

    @Test func responderURLsComeFromAuthorityInformationAccess() throws {
        let withURL = try TestCertificateIssuer.issue(
            TestCertificateSpec(
                commonName: "Leaf With OCSP", notBefore: Date() - 60, notAfter: Date() + 86400, isCA: false,
                ocspResponderURL: "http://127.0.0.1:9/ocsp03-test"),
            subjectKey: P256PrivateKey.generate().publicKey, issuer: chain.intermediate, issuerKey: chain.intermediateKey)
        #expect(withURL.ocspResponderURLs == ["http://127.0.0.1:9/ocsp03-test"])
        #expect(chain.leaf.ocspResponderURLs.isEmpty)
    }
}
