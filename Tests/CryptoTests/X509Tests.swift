import Crypto
import DemoSigner
import Foundation
import Testing

/// A root → intermediate → leaf chain made at test time with the test-signer support.
struct TestChain {
    static let leafOID = "1.2.840.113635.100.6.11.1"
    static let intermediateOID = "1.2.840.113635.100.6.2.1"

    let rootKey = P256PrivateKey.generate()
    let intermediateKey = P256PrivateKey.generate()
    let leafKey = P256PrivateKey.generate()
    let root: X509Certificate
    let intermediate: X509Certificate
    let leaf: X509Certificate

    init(leafValidity: ClosedRange<Date>? = nil, now: Date = Date()) throws {
        let year: TimeInterval = 365 * 86400
        root = try TestCertificateIssuer.selfSigned(
            TestCertificateSpec(commonName: "Test Root", notBefore: now - year, notAfter: now + 10 * year, isCA: true),
            key: rootKey)
        intermediate = try TestCertificateIssuer.issue(
            TestCertificateSpec(
                commonName: "Test Intermediate", notBefore: now - year, notAfter: now + 5 * year, isCA: true,
                extensions: [TestCertificateExtension(oid: Self.intermediateOID)]),
            subjectKey: intermediateKey.publicKey, issuer: root, issuerKey: rootKey)
        let validity = leafValidity ?? (now - 86400)...(now + year)
        leaf = try TestCertificateIssuer.issue(
            TestCertificateSpec(
                commonName: "Test Leaf", notBefore: validity.lowerBound, notAfter: validity.upperBound, isCA: false,
                extensions: [TestCertificateExtension(oid: Self.leafOID)]),
            subjectKey: leafKey.publicKey, issuer: intermediate, issuerKey: intermediateKey)
    }
}

@Suite struct X509CertificateTests {
    let chain: TestChain

    init() throws { chain = try TestChain() }

    @Test func derAndPEMRoundTrip() throws {
        let fromDER = try X509Certificate(der: chain.leaf.der)
        let fromPEM = try X509Certificate(pem: chain.leaf.pem)
        #expect(fromDER == chain.leaf)
        #expect(fromPEM == chain.leaf)
        #expect(fromDER.sha256Fingerprint == SHA256.hash(chain.leaf.der))
        #expect(fromDER.subject.contains("CN=Test Leaf"))
    }

    @Test func readsExtensionsKeysAndValidity() throws {
        #expect(chain.leaf.hasExtension(oid: TestChain.leafOID))
        #expect(!chain.leaf.hasExtension(oid: TestChain.intermediateOID))
        #expect(chain.intermediate.hasExtension(oid: TestChain.intermediateOID))
        #expect(chain.leaf.hasExtension(oid: "2.5.29.19"))  // basicConstraints
        #expect(!chain.leaf.hasExtension(oid: "not an oid"))
        #expect(chain.root.isCA && chain.intermediate.isCA && !chain.leaf.isCA)
        #expect(chain.leaf.publicKey?.derRepresentation == chain.leafKey.publicKey.derRepresentation)
        #expect(chain.leaf.anyPublicKey?.algorithm == .es256)
        #expect(chain.leaf.notBefore < Date() && Date() < chain.leaf.notAfter)
    }

    @Test func refusesGarbageAndTrailingBytes() {
        #expect(throws: CryptoError.self) { try X509Certificate(der: []) }
        #expect(throws: CryptoError.self) { try X509Certificate(der: [0x30, 0x03, 0x02, 0x01, 0x01]) }
        #expect(throws: CryptoError.self) { try X509Certificate(der: chain.leaf.der + [0]) }
        #expect(throws: CryptoError.self) { try X509Certificate(der: Array(chain.leaf.der.dropLast())) }
        #expect(throws: CryptoError.self) { try X509Certificate(pem: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n") }
        #expect(throws: CryptoError.self) { try X509Certificate.parseAll(Array("hello".utf8)) }
    }

    @Test func loadsDERFilesAndMultiBlockPEMFiles() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("crypto-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let der = directory.appendingPathComponent("root.cer")
        let pem = directory.appendingPathComponent("bundle.pem")
        try Data(chain.root.der).write(to: der)
        try Data((chain.root.pem + "\n" + chain.intermediate.pem).utf8).write(to: pem)
        #expect(try X509Certificate.loadAll(path: der.path) == [chain.root])
        #expect(try X509Certificate.loadAll(path: pem.path) == [chain.root, chain.intermediate])
        #expect(throws: CryptoError.self) { try X509Certificate.loadAll(path: directory.appendingPathComponent("absent").path) }
    }
}

@Suite struct X509ChainVerifierTests {
    @Test func verifiesToTheConfiguredRootAtTheGivenTime() throws {
        let chain = try TestChain()
        let verifier = try X509ChainVerifier(trustedRoots: [chain.root])
        let verified = try verifier.verify(leaf: chain.leaf, intermediates: [chain.intermediate], at: Date())
        #expect(verified == [chain.leaf, chain.intermediate, chain.root])
    }

    @Test func checksValidityAtTheRequestedDateNotNow() throws {
        let now = Date()
        let chain = try TestChain(leafValidity: (now - 10 * 86400)...(now - 5 * 86400))
        let verifier = try X509ChainVerifier(trustedRoots: [chain.root])
        _ = try verifier.verify(leaf: chain.leaf, intermediates: [chain.intermediate], at: now - 7 * 86400)
        let expired = #expect(throws: CryptoError.self) {
            try verifier.verify(leaf: chain.leaf, intermediates: [chain.intermediate], at: now)
        }
        #expect(expired?.code == .chainVerificationFailed)
        #expect(expired?.reason.contains("expired") == true)
        let early = #expect(throws: CryptoError.self) {
            try verifier.verify(leaf: chain.leaf, intermediates: [chain.intermediate], at: now - 20 * 86400)
        }
        #expect(early?.reason.contains("not yet valid") == true)
    }

    @Test func refusesAnotherRootAMissingIntermediateAndPartialChains() throws {
        let chain = try TestChain()
        let other = try TestChain()
        let otherRoot = try X509ChainVerifier(trustedRoots: [other.root])
        let foreign = #expect(throws: CryptoError.self) {
            try otherRoot.verify(leaf: chain.leaf, intermediates: [chain.intermediate], at: Date())
        }
        #expect(foreign?.reason.contains("unable to get local issuer certificate") == true)

        let right = try X509ChainVerifier(trustedRoots: [chain.root])
        #expect(throws: CryptoError.self) { try right.verify(leaf: chain.leaf, intermediates: [], at: Date()) }
        // A chain may not stop at a trusted intermediate: only self-signed roots anchor it.
        let intermediateOnly = try X509ChainVerifier(trustedRoots: [chain.intermediate])
        #expect(throws: CryptoError.self) { try intermediateOnly.verify(leaf: chain.leaf, intermediates: [], at: Date()) }
    }

    @Test func timesOutsideWhatX509CanExpressAreRefusedNotTrapped() throws {
        let chain = try TestChain()
        let verifier = try X509ChainVerifier(trustedRoots: [chain.root])
        for seconds in [1e15, -1e15, .infinity] {
            let error = #expect(throws: CryptoError.self) {
                try verifier.verify(leaf: chain.leaf, intermediates: [chain.intermediate], at: Date(timeIntervalSince1970: seconds))
            }
            #expect(error?.code == .invalidInput)
        }
    }

    @Test func intermediatesFromAnotherChainDoNotHelp() throws {
        let chain = try TestChain()
        let other = try TestChain()
        let verifier = try X509ChainVerifier(trustedRoots: [chain.root, other.root])
        #expect(throws: CryptoError.self) {
            try verifier.verify(leaf: chain.leaf, intermediates: [other.intermediate], at: Date())
        }
    }
}
