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
}
