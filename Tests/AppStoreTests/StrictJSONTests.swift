import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import Testing

/// The verifier's JSON decoding (`AppStoreJSON.decode`): strict RFC 8259, and never looser than
/// Foundation's JSONDecoder nor different from it where both accept.
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

    func probe(_ json: String) throws -> Probe { try AppStoreJSON.decode(Probe.self, from: Array(json.utf8)) }

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
            #expect(throws: (any Error).self, "\(bytes)") { try AppStoreJSON.decode(Probe.self, from: bytes) }
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

    // MARK: Differential checks against Foundation

    /// Foundation's decoder with the options the models were written for.
    func foundation<T: Decodable>(_ type: T.Type, _ bytes: [UInt8]) -> T? { try? AppStoreJSON.decoder().decode(T.self, from: Data(bytes)) }

    static let texts = ["plain", "é😀 ünïcödé", "quote \" backslash \\ slash /", "control \u{1} \n \t", "", String(repeating: "x", count: 300)]

    func randomNotification(_ rng: inout FuzzTests.SeededGenerator) throws -> ResponseBodyV2DecodedPayload {
        var payload = ResponseBodyV2DecodedPayload()
        payload.rawNotificationType = ["DID_RENEW", "SOMETHING_NEW", Self.texts.randomElement(using: &rng)!].randomElement(using: &rng)
        payload.rawSubtype = Bool.random(using: &rng) ? nil : "VOLUNTARY"
        payload.notificationUUID = UUID().uuidString
        payload.version = "2.0"
        payload.signedDate =
            Bool.random(using: &rng) ? nil : Date(timeIntervalSince1970: Double(Int64.random(in: 0...2_000_000_000_000, using: &rng)) / 1000)
        var data = NotificationData()
        data.rawEnvironment = ["Sandbox", "Production", "Elsewhere"].randomElement(using: &rng)
        data.appAppleId = Bool.random(using: &rng) ? nil : Int64.random(in: Int64.min...Int64.max, using: &rng)
        data.bundleId = Self.texts.randomElement(using: &rng)
        data.signedTransactionInfo = String(repeating: "eyJhbGciOiJFUzI1NiJ9", count: Int.random(in: 0...200, using: &rng))
        data.rawStatus = Bool.random(using: &rng) ? nil : Int32.random(in: Int32.min...Int32.max, using: &rng)
        data.rawConsumptionRequestReason = Bool.random(using: &rng) ? nil : "UNINTENDED_PURCHASE"
        payload.data = Bool.random(using: &rng) ? data : nil
        if payload.data == nil {
            var summary = Summary()
            summary.bundleId = "com.example"
            summary.storefrontCountryCodes = ["USA", "FRA"]
            summary.succeededCount = 3
            payload.summary = summary
        }
        return payload
    }

    @Test func randomModelsDecodeAsFoundationDecodesThem() throws {
        var rng = FuzzTests.SeededGenerator(state: UInt64.random(in: 0...UInt64.max))
        let encoders = [AppStoreJSON.encoder(), JSONEncoder()]
        encoders[1].dateEncodingStrategy = .millisecondsSince1970
        encoders[1].outputFormatting = [.prettyPrinted]
        for _ in 0..<500 {
            let payload = try randomNotification(&rng)
            for encoder in encoders {
                let bytes = Array(try encoder.encode(payload))
                let ours = try AppStoreJSON.decode(ResponseBodyV2DecodedPayload.self, from: bytes)
                #expect(ours == foundation(ResponseBodyV2DecodedPayload.self, bytes))
                #expect(ours == payload)
            }
            let transaction = TestPayloads.transaction(bundleId: Self.texts.randomElement(using: &rng)!, environment: .sandbox)
            let bytes = Array(try encoders[Int.random(in: 0...1, using: &rng)].encode(transaction))
            let decoded = try AppStoreJSON.decode(JWSTransactionDecodedPayload.self, from: bytes)
            #expect(decoded == foundation(JWSTransactionDecodedPayload.self, bytes) && decoded == transaction)
        }
    }

    @Test(.enabled(if: AppleVectors.isPresent, AppleVectors.skipComment))
    func genuineApplePayloadsDecodeAsFoundationDecodesThem() throws {
        var checked = 0
        for entry in AppleVectors.entries where entry.file.hasSuffix(".jws") && entry.expect == "accept" {
            let segments = TokenSurgery.segments(try AppleVectors.text(entry.file))
            let bytes = try #require(Base64URL.decode(segments[1]))
            switch entry.kind {
            case "notification":
                #expect(
                    try AppStoreJSON.decode(ResponseBodyV2DecodedPayload.self, from: bytes) == foundation(ResponseBodyV2DecodedPayload.self, bytes))
            case "transaction":
                #expect(
                    try AppStoreJSON.decode(JWSTransactionDecodedPayload.self, from: bytes) == foundation(JWSTransactionDecodedPayload.self, bytes))
            case "renewalInfo":
                #expect(
                    try AppStoreJSON.decode(JWSRenewalInfoDecodedPayload.self, from: bytes) == foundation(JWSRenewalInfoDecodedPayload.self, bytes))
            default: continue
            }
            checked += 1
        }
        #expect(checked > 60)
    }

    /// Random edits of valid documents: never a crash, and whatever we accept Foundation accepts
    /// with the same result (we may refuse more, never less).
    @Test func mutatedDocumentsAreNeverAcceptedLooserThanFoundation() throws {
        let seed = UInt64.random(in: 0...UInt64.max)
        var rng = FuzzTests.SeededGenerator(state: seed)
        let alphabet = Array("{}[],:\"\\/ 0123456789-+.eEtrufalsn\u{1}é".utf8)
        var accepted = 0
        let fuzz = FuzzTests()
        for iteration in 0..<20_000 {
            let notification = iteration % 2 == 0
            let original: [UInt8] =
                notification
                ? Array(try AppStoreJSON.encoder().encode(try randomNotification(&rng)))
                : Array(try AppStoreJSON.encoder().encode(TestPayloads.transaction(bundleId: "com.example", environment: .sandbox)))
            var bytes = original
            for _ in 0..<Int.random(in: 1...3, using: &rng) {
                fuzz.mutateBytes(&bytes, alphabet: Bool.random(using: &rng) ? alphabet : nil, using: &rng)
            }
            if notification {
                guard let ours = try? AppStoreJSON.decode(ResponseBodyV2DecodedPayload.self, from: bytes) else { continue }
                accepted += 1
                #expect(ours == foundation(ResponseBodyV2DecodedPayload.self, bytes), "seed \(seed): \(String(decoding: bytes, as: UTF8.self))")
            } else {
                guard let ours = try? AppStoreJSON.decode(JWSTransactionDecodedPayload.self, from: bytes) else { continue }
                accepted += 1
                #expect(ours == foundation(JWSTransactionDecodedPayload.self, bytes), "seed \(seed): \(String(decoding: bytes, as: UTF8.self))")
            }
        }
        print("json fuzz seed=\(seed) accepted=\(accepted) of 20000")
    }
}
