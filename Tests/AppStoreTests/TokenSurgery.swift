import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import ServiceRuntime

/// Edits compact JWS tokens for negative tests.
enum TokenSurgery {
    static func segments(_ token: String) -> [String] { token.split(separator: ".", omittingEmptySubsequences: false).map(String.init) }

    static func replacing(_ token: String, segment index: Int, with text: String) -> String {
        var parts = segments(token)
        parts[index] = text
        return parts.joined(separator: ".")
    }

    /// The token with its decoded payload text edited (JSON stays valid when `edit` keeps it so).
    static func editingPayload(_ token: String, _ edit: (String) -> String) -> String {
        let payload = String(decoding: Base64URL.decode(segments(token)[1])!, as: UTF8.self)
        return replacing(token, segment: 1, with: Base64URL.encode(Array(edit(payload).utf8)))
    }

    static func editingSignature(_ token: String, _ edit: ([UInt8]) -> [UInt8]) -> String {
        replacing(token, segment: 2, with: Base64URL.encode(edit(Base64URL.decode(segments(token)[2])!)))
    }
}

/// A verifier trusting `signer`'s root, for one app in one environment.
func makeVerifier(
    trusting signer: TestAppleSigner, bundleId: String = "com.example.app", environment: AppStoreEnvironment = .sandbox,
    appAppleId: Int64? = nil, allowXcode: Bool = false, clock: any WallClock = SystemClock(),
    metrics: MetricsRegistry = MetricsRegistry()
) throws -> SignedDataVerifier {
    try SignedDataVerifier(
        configuration: signer.verifierConfiguration(
            bundleId: bundleId, environment: environment, appAppleId: appAppleId ?? (environment == .production ? 1234 : nil),
            allowXcode: allowXcode),
        clock: clock, logger: Logger(label: "test", sink: .memory()), metrics: metrics)
}
