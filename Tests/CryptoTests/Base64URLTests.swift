import Crypto
import Testing

@Suite struct Base64URLTests {
    /// RFC 4648 §10 vectors without their padding.
    @Test(arguments: [
        ("", ""), ("f", "Zg"), ("fo", "Zm8"), ("foo", "Zm9v"), ("foob", "Zm9vYg"), ("fooba", "Zm9vYmE"), ("foobar", "Zm9vYmFy"),
    ])
    func rfc4648Vectors(plain: String, encoded: String) {
        #expect(Base64URL.encode(Array(plain.utf8)) == encoded)
        #expect(Base64URL.decode(encoded) == Array(plain.utf8))
    }

    @Test func usesTheURLAlphabet() {
        #expect(Base64URL.encode([0xfb, 0xff, 0xbf]) == "-_-_")
        #expect(Base64URL.decode("-_-_") == [0xfb, 0xff, 0xbf])
    }

    @Test(arguments: [
        "Zg==",  // padding
        "Zm8=",  // padding
        "Z",  // impossible length
        "Zh",  // non-zero leftover bits
        "Zm9",  // non-zero leftover bits
        "Zm9v+",  // standard-alphabet character
        "Zm9v/A",  // standard-alphabet character
        "Zm 9v",  // whitespace
        "Zm9v\n",  // newline
        "é",  // non-ASCII
    ])
    func rejectsNonCanonicalText(text: String) {
        #expect(Base64URL.decode(text) == nil)
    }

    @Test func roundTripsEveryLengthUpTo64() {
        for length in 0...64 {
            let bytes = SecureRandom.bytes(length)
            let text = Base64URL.encode(bytes)
            #expect(!text.contains("="))
            #expect(Base64URL.decode(text) == bytes)
            #expect(Base64URL.decode(text[...]) == bytes)
        }
    }

    @Test func longInputsRoundTripAndRefuseAnyBadCharacter() {
        for length in [45, 46, 47, 48, 60, 61, 62, 100, 1000, 13_337] {
            let bytes = SecureRandom.bytes(length)
            let text = Array(Base64URL.encode(bytes).utf8)
            #expect(Base64URL.decode(bytes: text) == bytes)
            // A character outside the alphabet anywhere (inside SIMD blocks or the scalar tail) is refused.
            for position in Set([0, 1, 15, 16, 17, 31, text.count / 2, text.count - 5, text.count - 1]) where position < text.count {
                for bad in Array("=+/ .\n".utf8) + [0x00, 0x7F, 0xC3, 0x40, 0x5B, 0x60, 0x7B, 0x2F, 0x3A] {
                    var broken = text
                    broken[position] = bad
                    #expect(Base64URL.decode(bytes: broken) == nil, "length \(length) position \(position) byte \(bad)")
                }
            }
        }
    }
}
