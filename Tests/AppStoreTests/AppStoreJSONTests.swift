import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import Testing

/// The verifier's JSON decoding (`AppStoreJSON.decode`, the strict parser with the hand-written
/// notification path): never looser than Foundation's JSONDecoder nor different from it where
/// both accept.
@Suite struct AppStoreJSONTests {

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
