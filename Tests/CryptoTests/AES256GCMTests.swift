import Crypto
import Testing

@Suite struct AES256GCMTests {
    let key = SecureRandom.bytes(32)

    /// AES-256 known answers from the GCM specification (McGrew & Viega, test cases 13, 14, 16).
    @Test(arguments: [
        (
            String(repeating: "00", count: 32), String(repeating: "00", count: 12), "", "",
            "530f8afbc74536b9a963b4f1c4cb738b"
        ),
        (
            String(repeating: "00", count: 32), String(repeating: "00", count: 12), String(repeating: "00", count: 16), "",
            "cea7403d4d606b6e074ec5d3baf39d18d0d1c8a799996bf0265b98b5d48ab919"
        ),
        (
            "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308", "cafebabefacedbaddecaf888",
            "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
            "feedfacedeadbeeffeedfacedeadbeefabaddad2",
            "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f66276fc6ece0f4e1768cddf8853bb2d551b"
        ),
    ])
    func opensKnownAnswers(key: String, nonce: String, plaintext: String, aad: String, ciphertextAndTag: String) throws {
        let sealed = [UInt8](hex: nonce) + [UInt8](hex: ciphertextAndTag)
        #expect(try AES256GCM.open(sealed, key: [UInt8](hex: key), aad: [UInt8](hex: aad)) == [UInt8](hex: plaintext))
    }

    @Test(arguments: [0, 1, 15, 16, 17, 1000])
    func roundTrips(length: Int) throws {
        let plaintext = SecureRandom.bytes(length)
        let aad = Array("order-42".utf8)
        let sealed = try AES256GCM.seal(plaintext, key: key, aad: aad)
        #expect(sealed.count == 12 + length + 16)
        #expect(try AES256GCM.open(sealed, key: key, aad: aad) == plaintext)
    }

    @Test func nonceIsFreshEveryTime() throws {
        let a = try AES256GCM.seal([1, 2, 3], key: key)
        let b = try AES256GCM.seal([1, 2, 3], key: key)
        #expect(a.prefix(12) != b.prefix(12))
    }

    @Test func everyFlippedBitIsDetected() throws {
        let sealed = try AES256GCM.seal(Array("secret".utf8), key: key, aad: [9])
        for index in sealed.indices {
            var tampered = sealed
            tampered[index] ^= 0x01
            #expect(throws: CryptoError.self) { try AES256GCM.open(tampered, key: key, aad: [9]) }
        }
    }

    @Test func wrongKeyOrAADIsAnAuthenticationFailure() throws {
        let sealed = try AES256GCM.seal(Array("secret".utf8), key: key, aad: [1])
        let wrongAAD = #expect(throws: CryptoError.self) { try AES256GCM.open(sealed, key: key, aad: [2]) }
        #expect(wrongAAD?.code == .authenticationFailure)
        let wrongKey = #expect(throws: CryptoError.self) { try AES256GCM.open(sealed, key: SecureRandom.bytes(32), aad: [1]) }
        #expect(wrongKey?.code == .authenticationFailure)
    }

    @Test func refusesBadSizes() {
        let shortKey = #expect(throws: CryptoError.self) { try AES256GCM.seal([1], key: SecureRandom.bytes(16)) }
        #expect(shortKey?.code == .invalidKey)
        let short = #expect(throws: CryptoError.self) { try AES256GCM.open(SecureRandom.bytes(27), key: key) }
        #expect(short?.code == .invalidInput)
    }
}
