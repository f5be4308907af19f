import Crypto
import DemoSigner
import Foundation
import Testing

@Suite struct PKCS7SignedDataTests {
    let chain: TestChain
    let trust: X509ChainVerifier
    static let content = Array("the signed content of a test receipt".utf8)

    init() throws {
        chain = try TestChain()
        trust = try X509ChainVerifier(trustedRoots: [chain.root])
    }

    func signed(_ encoding: TestPKCS7.Encoding, content: [UInt8] = content, by chain: TestChain? = nil) throws -> [UInt8] {
        let chain = chain ?? self.chain
        return try TestPKCS7.sign(
            content, certificate: chain.leaf, key: chain.leafKey, chain: [chain.intermediate, chain.root], encoding: encoding)
    }

    @Test(arguments: TestPKCS7.Encoding.allCases)
    func parsesAndVerifiesToTheTrustedRoot(encoding: TestPKCS7.Encoding) throws {
        let bytes = try signed(encoding)
        // BER: an indefinite outer length; DER: a definite one.
        #expect((bytes[1] == 0x80) == (encoding == .berIndefinite))
        let signedData = try PKCS7SignedData(der: bytes)
        #expect(signedData.content == Self.content)
        #expect(Set(signedData.certificates) == [chain.leaf, chain.intermediate, chain.root])
        #expect(try signedData.verifySignature() == chain.leaf)
        #expect(try signedData.verify(trust: trust, at: Date()) == [chain.leaf, chain.intermediate, chain.root])
    }

    @Test(arguments: TestPKCS7.Encoding.allCases)
    func aChangedContentByteBreaksTheSignature(encoding: TestPKCS7.Encoding) throws {
        var bytes = try signed(encoding)
        let at = try #require(bytes.indices.first { bytes[$0...].starts(with: Self.content) })
        bytes[at] ^= 0x01
        let signedData = try PKCS7SignedData(der: bytes)
        #expect(signedData.content != Self.content)
        #expect(throws: CryptoError.self) { try signedData.verifySignature() }
        let error = try #require(throws: CryptoError.self) { try signedData.verify(trust: trust, at: Date()) }
        #expect(error.code == .signatureVerificationFailed)
    }

    @Test func anotherCAOrADateOutsideTheValidityIsRefused() throws {
        let other = try TestChain()
        let foreign = try PKCS7SignedData(der: try signed(.der, by: other))
        #expect(try foreign.verifySignature() == other.leaf)
        let error = try #require(throws: CryptoError.self) { try foreign.verify(trust: trust, at: Date()) }
        #expect(error.code == .chainVerificationFailed)

        let now = Date()
        let expiring = try TestChain(leafValidity: (now - 100 * 86400)...(now - 10 * 86400), now: now)
        let old = try PKCS7SignedData(der: try signed(.der, by: expiring))
        let trustExpiring = try X509ChainVerifier(trustedRoots: [expiring.root])
        #expect(try old.verify(trust: trustExpiring, at: now - 50 * 86400).count == 3)
        let late = try #require(throws: CryptoError.self) { try old.verify(trust: trustExpiring, at: now) }
        #expect(late.code == .chainVerificationFailed)
    }

    @Test(arguments: TestPKCS7.Encoding.allCases)
    func malformedInputIsRefused(encoding: TestPKCS7.Encoding) throws {
        let bytes = try signed(encoding)
        let inputs: [[UInt8]] = [
            Array(bytes.prefix(bytes.count - 1)), Array(bytes.prefix(bytes.count / 2)), bytes + [0], [], [0x30, 0x80],
            chain.leaf.der, Array("garbage".utf8),
        ]
        for input in inputs {
            let error = try #require(throws: CryptoError.self) { try PKCS7SignedData(der: input) }
            #expect(error.code == .invalidInput)
        }
    }
}

@Suite struct BERTests {
    @Test func readsDefiniteAndIndefiniteLengths() throws {
        // SEQUENCE (indefinite) { INTEGER 5, SET (indefinite) { OCTET STRING "ab" }, NULL }
        let bytes: [UInt8] = [0x30, 0x80, 0x02, 0x01, 0x05, 0x31, 0x80, 0x04, 0x02, 0x61, 0x62, 0x00, 0x00, 0x05, 0x00, 0x00, 0x00]
        let sequence = try BERElement(parsing: bytes[...])
        #expect(sequence.isUniversal(BERElement.sequenceTag) && sequence.isConstructed)
        let children = try sequence.children()
        #expect(children.count == 3)
        #expect(try children[0].integer() == 5)
        #expect(try children[1].children().map { try $0.octets() } == [[0x61, 0x62]])
        #expect(children[2].isUniversal(5) && children[2].contents.isEmpty)
    }

    @Test func joinsConstructedStringSegments() throws {
        // OCTET STRING (constructed, indefinite) { "ab", OCTET STRING (constructed) { "c" } }
        let bytes: [UInt8] = [0x24, 0x80, 0x04, 0x02, 0x61, 0x62, 0x24, 0x03, 0x04, 0x01, 0x63, 0x00, 0x00]
        #expect(try BERElement(parsing: bytes[...]).octets() == Array("abc".utf8))
        // A segment of another type is refused.
        let mixed: [UInt8] = [0x24, 0x04, 0x0c, 0x02, 0x61, 0x62]
        #expect(throws: CryptoError.self) { try BERElement(parsing: mixed[...]).octets() }
        let utf8: [UInt8] = [0x0c, 0x03, 0xc3, 0xa9, 0x21]
        #expect(try BERElement(parsing: utf8[...]).string() == "é!")
        #expect(throws: CryptoError.self) { try BERElement(parsing: [0x0c, 0x01, 0xff][...]).string() }
    }

    @Test func readsIntegersAndLongForms() throws {
        #expect(try BERElement(parsing: [0x02, 0x02, 0x06, 0xa7][...]).integer() == 1703)
        #expect(try BERElement(parsing: [0x02, 0x01, 0xff][...]).integer() == -1)
        #expect(try BERElement(parsing: [0x02, 0x08, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff][...]).integer() == Int64.max)
        #expect(throws: CryptoError.self) { try BERElement(parsing: [0x02, 0x09, 0, 1, 2, 3, 4, 5, 6, 7, 8][...]).integer() }
        #expect(throws: CryptoError.self) { try BERElement(parsing: [0x02, 0x00][...]).integer() }
        let long = [0x04, 0x81, 0x80] + [UInt8](repeating: 7, count: 128)
        #expect(try BERElement(parsing: long[...]).octets().count == 128)
        // High tag number form: [APPLICATION 300] primitive, empty.
        let high = try BERElement(parsing: [0x5f, 0x82, 0x2c, 0x00][...])
        #expect(high.tagClass == 1 && high.tagNumber == 300)
    }

    @Test func refusesMalformedFraming() {
        let inputs: [[UInt8]] = [
            [],
            [0x04, 0x05, 0x01],  // truncated contents
            [0x04, 0x01, 0x01, 0x00],  // trailing byte
            [0x30, 0x80, 0x02, 0x01, 0x05],  // no end-of-contents
            [0x04, 0x80, 0x00, 0x00],  // primitive with an indefinite length
            [0x04, 0x85, 0x01, 0x00, 0x00, 0x00, 0x00],  // five length bytes
            [0x30],  // no length
            [0x1f, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x00],  // tag number overflow
        ]
        for input in inputs {
            #expect(throws: CryptoError.self, "\(input)") { try BERElement(parsing: input[...]) }
        }
    }

    @Test func boundsIndefiniteNesting() throws {
        // 40 nested indefinite SEQUENCEs: deeper than the bound, refused without recursing on.
        let depth = 40
        let bytes = [UInt8]((0..<depth).flatMap { _ in [0x30, 0x80] }) + [UInt8](repeating: 0, count: 2 * depth)
        #expect(throws: CryptoError.self) { try BERElement(parsing: bytes[...]) }
        let shallow = [UInt8]((0..<8).flatMap { _ in [0x30, 0x80] }) + [UInt8](repeating: 0, count: 16)
        #expect(try BERElement(parsing: shallow[...]).children().count == 1)
    }
}
