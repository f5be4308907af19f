import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import Testing

/// 100,000 mutated tokens: the verifier must neither crash nor accept any of them.
@Suite struct FuzzTests {
    /// SplitMix64: deterministic, so a failure reproduces from the printed seed.
    struct SeededGenerator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ {}\"\\".utf8)

    @Test func mutatedTokensNeverCrashOrVerify() async throws {
        let signer = try TestAppleSigner()
        let verifier = try makeVerifier(trusting: signer)
        // Small payloads keep each attempt cheap; the header (three certificates) dominates.
        var renewal = JWSRenewalInfoDecodedPayload()
        renewal.environment = .sandbox
        renewal.signedDate = TestPayloads.wholeMilliseconds(Date())
        renewal.autoRenewStatus = .on
        var transaction = JWSTransactionDecodedPayload()
        transaction.environment = .sandbox
        transaction.bundleId = "com.example.app"
        transaction.signedDate = renewal.signedDate
        let notification = try signer.signNotification(type: .test, bundleId: "com.example.app", environment: .sandbox)
        let originals = [
            Original(try signer.sign(renewal), .renewalInfo), Original(try signer.sign(transaction), .transaction),
            Original(notification, .notification),
        ]
        for original in originals { try await verify(original.token, as: original.kind, verifier) }

        let seed = UInt64.random(in: 0...UInt64.max)
        var rng = SeededGenerator(state: seed)
        var outcomes: [String: Int] = [:]
        let iterations = 100_000
        for _ in 0..<iterations {
            let original = originals[Int.random(in: 0..<originals.count, using: &rng)]
            let mutated = mutate(original, using: &rng)
            let outcome: String
            do {
                try await verify(mutated, as: original.kind, verifier)
                outcome = mutated == original.token ? "unchanged" : "ACCEPTED"
            } catch { outcome = error.code.rawValue }
            outcomes[outcome, default: 0] += 1
            if outcome == "ACCEPTED" {
                Issue.record("seed \(seed): a mutated token verified: \(mutated.prefix(80))…")
            }
        }
        print("fuzz seed=\(seed) outcomes=\(outcomes.sorted { $0.key < $1.key })")
        #expect(outcomes.values.reduce(0, +) == iterations)
        #expect(outcomes["ACCEPTED"] == nil)
    }

    enum Kind { case renewalInfo, transaction, notification }

    /// A valid token with its segments split and decoded once, so each mutation is cheap.
    struct Original {
        let token: String
        let kind: Kind
        let utf8: [UInt8]
        let segments: [String]
        let decoded: [[UInt8]]

        init(_ token: String, _ kind: Kind) {
            self.token = token
            self.kind = kind
            utf8 = Array(token.utf8)
            segments = TokenSurgery.segments(token)
            decoded = segments.map { Base64URL.decode($0)! }
        }
    }

    func verify(_ token: String, as kind: Kind, _ verifier: SignedDataVerifier) async throws(VerificationError) {
        switch kind {
        case .renewalInfo: _ = try await verifier.verifyRenewalInfo(token)
        case .transaction: _ = try await verifier.verifyTransaction(token)
        case .notification: _ = try await verifier.verifyNotification(token)
        }
    }

    /// One random edit: of the token text, or of a decoded segment re-encoded so the mutation
    /// reaches the JSON, certificate and signature checks instead of stopping at base64.
    func mutate(_ original: Original, using rng: inout SeededGenerator) -> String {
        var segments = original.segments
        // Weighted towards edits that get past base64 and JSON: the payload (JSON decoding,
        // claims, signature check) most, then the signature, then the header (certificate
        // parsing and chain building, the costliest path).
        let segment: Int
        switch Int.random(in: 0..<20, using: &rng) {
        case 0..<6:
            var bytes = original.utf8
            mutateBytes(&bytes, alphabet: Self.alphabet, using: &rng)
            return String(decoding: bytes, as: UTF8.self)
        case 6..<14: segment = 1
        case 14..<17: segment = 2
        case 17..<19: segment = 0
        default:
            let a = Int.random(in: 0..<3, using: &rng)
            let b = Int.random(in: 0..<3, using: &rng)
            segments.swapAt(a, b)
            if Bool.random(using: &rng) { segments.append(segments[a]) }
            return segments.joined(separator: ".")
        }
        var decoded = original.decoded[segment]
        mutateBytes(&decoded, alphabet: nil, using: &rng)
        segments[segment] = Base64URL.encode(decoded)
        return segments.joined(separator: ".")
    }

    func mutateBytes(_ bytes: inout [UInt8], alphabet: [UInt8]?, using rng: inout SeededGenerator) {
        func randomByte() -> UInt8 { alphabet?.randomElement(using: &rng) ?? UInt8.random(in: 0...255, using: &rng) }
        guard !bytes.isEmpty else {
            bytes = [randomByte()]
            return
        }
        let position = Int.random(in: 0..<bytes.count, using: &rng)
        switch Int.random(in: 0..<6, using: &rng) {
        case 0: bytes[position] ^= UInt8(1) << UInt8.random(in: 0..<8, using: &rng)
        case 1: bytes[position] = randomByte()
        case 2: bytes.removeSubrange(position..<min(bytes.count, position + Int.random(in: 1...16, using: &rng)))
        case 3: bytes.insert(contentsOf: (0..<Int.random(in: 1...8, using: &rng)).map { _ in randomByte() }, at: position)
        case 4: bytes.removeSubrange(position...)
        default:
            let end = min(bytes.count, position + Int.random(in: 1...32, using: &rng))
            bytes.insert(contentsOf: bytes[position..<end], at: position)
        }
    }
}
