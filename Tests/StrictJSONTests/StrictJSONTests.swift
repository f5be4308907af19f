import Foundation
import StrictJSON
import Testing

/// The strict parser and its decoder: RFC 8259 only, exact values. (That it is never looser than
/// Foundation's JSONDecoder, nor different where both accept, is checked on Apple's payloads by
/// `AppStoreJSONTests`.)
@Suite struct StrictJSONTests {
    struct Probe: Codable, Equatable {
        var s: String?
        var i: Int64?
        var small: Int32?
        var d: Double?
        var b: Bool?
        var date: Date?
        var list: [Int64]?
        var inner: Inner?
    }

    struct Inner: Codable, Equatable {
        var name: String?
        var values: [String]?
    }

    func probe(_ json: String) throws -> Probe { try StrictJSON.decode(Probe.self, from: Array(json.utf8)) }

    @Test(arguments: [
        #"{"s":"a",}"#, #"{"list":[1,]}"#, #"{"i":01}"#, #"{"d":1.}"#, #"{"d":.5}"#, #"{"i":-}"#, #"{"d":1e}"#, #"{"d":1e+}"#,
        #"{"d":NaN}"#, #"{"d":Infinity}"#, #"{"d":-Infinity}"#, #"{'s':'a'}"#, #"{"s":"a"}//"#, #"{"s":"a"} x"#, #"{"s":"a"}{}"#,
        #"{"s":"\x"}"#, #"{"s":"\u12"}"#, #"{"s":"\uZZZZ"}"#, #"{"s":"\ud800"}"#, #"{"s":"\udc00"}"#, #"{"s":"\ud800\u0041"}"#,
        #"{"s":"a","s":"b"}"#, #"{"inner":{"name":"a","name":"a"}}"#, "", "   ", #"{"b":tru}"#, #"{"b":nul}"#, #"{"s" "a"}"#,
        #"{"s":"a" "i":1}"#, #"{"s":"abc"#, #"{"s":"a"#, "{", #"{"s":"a""#, "\u{FEFF}{}", #"{"d":1e400}"#, #"{"d":17959E-79133003}"#,
        #"{"d":1e-320}"#, #"{s:"a"}"#,
        #"{"i":1.0}"#, #"{"i":1e2}"#, #"{"small":2147483648}"#, #"{"i":9223372036854775808}"#, #"{"b":1}"#, #"{"s":1}"#,
        #"{"list":{}}"#, #"{"inner":[]}"#, "[]", "null", #""text""#, #"{"s":"tab"# + "\t" + #"inside"}"#, #"{"s":"new"# + "\n" + #"line"}"#,
    ])
    func invalidDocumentsAreRefused(json: String) {
        #expect(throws: (any Error).self) { try probe(json) }
    }

    @Test func controlBytesAndInvalidUTF8AreRefused() {
        for bytes: [UInt8] in [
            [0x7B, 0x22, 0x73, 0x22, 0x3A, 0x22, 0x01, 0x22, 0x7D],  // {"s":"\u{1}"}
            [0x7B, 0x22, 0x73, 0x22, 0x3A, 0x22, 0xFF, 0x22, 0x7D],  // invalid byte
            [0x7B, 0x22, 0x73, 0x22, 0x3A, 0x22, 0xC0, 0xAF, 0x22, 0x7D],  // overlong '/'
            [0x7B, 0x22, 0x73, 0x22, 0x3A, 0x22, 0xED, 0xA0, 0x80, 0x22, 0x7D],  // encoded surrogate
            [0x7B, 0x22, 0x73, 0x22, 0x3A, 0x22, 0xE2, 0x82, 0x22, 0x7D],  // truncated sequence
            [0x7B, 0x7D, 0x00],  // NUL after the document
        ] {
            #expect(throws: (any Error).self, "\(bytes)") { try StrictJSON.decode(Probe.self, from: bytes) }
        }
    }

    @Test func deepNestingIsRefusedWithoutCrashing() throws {
        let deep = String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        #expect(throws: (any Error).self) { try probe(#"{"list":"# + deep + "}") }
        let ok = #"{"inner":{"values":["a"]}}"#
        #expect(try probe(ok).inner?.values == ["a"])
    }

    @Test func validDocumentsDecodeExactly() throws {
        let escaped = try probe(#"{"s":"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00 é😀"}"#)
        #expect(escaped.s == "\"\\/\u{8}\u{C}\n\r\té😀 é😀")
        let numbers = try probe(#" { "i" : -9223372036854775808 , "small":-0, "d":1.5E-2, "b":false, "list":[0,9223372036854775807] } "#)
        #expect(numbers.i == Int64.min && numbers.small == 0 && numbers.d == 0.015 && numbers.b == false)
        #expect(numbers.list == [0, Int64.max])
        #expect(try probe(#"{"d":12}"#).d == 12)
        #expect(try probe(#"{"date":1759302518835}"#).date == Date(timeIntervalSince1970: 1_759_302_518.835))
        #expect(try probe(#"{"date":1.5e3}"#).date == Date(timeIntervalSince1970: 1.5))
        let ignored = try probe(#"{"unknown":{"deep":[1,{"x":null}],"e":"\u0041"},"s":null,"other":[],"i":7}"#)
        #expect(ignored == Probe(i: 7))
        #expect(try probe("{}") == Probe())
        let long = String(repeating: "abcdefgh", count: 1000) + "é" + String(repeating: "z", count: 7)
        #expect(try probe(#"{"s":""# + long + #""}"#).s == long)
    }
}
