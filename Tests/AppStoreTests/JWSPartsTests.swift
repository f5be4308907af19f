import AppStore
import Testing

/// A compact JWS's three segments, split on its "." bytes.
@Suite struct JWSPartsTests {
    @Test func exactlyThreeSegmentsEmptyOnesAllowed() throws {
        let parts = try #require(JWSParts("aGVhZA.cGF5bG9hZA.c2ln"))
        #expect(parts.header == "aGVhZA" && parts.payload == "cGF5bG9hZA" && parts.signature == "c2ln")
        #expect(parts.signingInput == "aGVhZA.cGF5bG9hZA")
        let empty = try #require(JWSParts(".."))
        #expect(empty.header.isEmpty && empty.payload.isEmpty && empty.signature.isEmpty && empty.signingInput == ".")
        for token in ["", "a", "a.b", "a.b.c.d", "...", "a.b.c."] { #expect(JWSParts(token) == nil, "\(token)") }
    }

    @Test func segmentsAroundNonASCIICharactersKeepThem() throws {
        let parts = try #require(JWSParts("é\u{301}.👍🏽.x\u{0}y"))
        #expect(parts.header == "é\u{301}" && parts.payload == "👍🏽" && parts.signature == "x\u{0}y")
        #expect(parts.signingInput == "é\u{301}.👍🏽")
    }
}
