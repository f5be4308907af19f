/// Why signed App Store data was refused: one of a closed set of stable codes, plus a reason for
/// operators (never containing the token itself).
public struct VerificationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The stable codes; clients and dashboards key on `rawValue`, never on `reason`.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        /// Not a compact JWS of the expected shape: segments, base64url, JSON, size.
        case malformed = "MALFORMED"
        /// The algorithm is not ES256 or the signature does not verify with the leaf key.
        case invalidSignature = "INVALID_SIGNATURE"
        /// The x5c chain is not exactly leaf, intermediate, root chaining to a configured root
        /// with Apple's marker extensions, valid at the verification date.
        case invalidChain = "INVALID_CHAIN"
        /// Genuine data for another app: bundleId or appAppleId differ from the configured ones.
        case invalidApp = "INVALID_APP"
        /// Genuine data from another environment than the one expected, or locally signed
        /// (Xcode / LocalTesting) data that the configuration does not allow.
        case invalidEnvironment = "INVALID_ENVIRONMENT"
        /// The verification could not be completed (online revocation check unavailable);
        /// trying again later may succeed.
        case retryableVerification = "RETRYABLE_VERIFICATION"
    }

    public let code: Code
    public let reason: String

    public init(_ code: Code, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    /// The error class of the domain model, which decides retries.
    public var errorClass: VerificationErrorClass {
        switch code {
        case .retryableVerification: .retryableVerification
        case .malformed, .invalidSignature, .invalidChain: .invalidSignature
        case .invalidApp, .invalidEnvironment: .invalidApp
        }
    }

    /// Whether the same input may verify later; false means refuse it for good.
    public var isRetryable: Bool { errorClass == .retryableVerification }

    public var description: String { "\(code.rawValue): \(reason)" }
}

/// The error classes of domain.md that verification failures fall into.
public enum VerificationErrorClass: String, Sendable, Hashable, CaseIterable {
    /// Retry later (OCSP or network trouble).
    case retryableVerification = "RETRYABLE_VERIFICATION"
    /// Not provably signed by Apple: never retried.
    case invalidSignature = "INVALID_SIGNATURE"
    /// Signed by Apple but not for this app or environment: never retried.
    case invalidApp = "INVALID_APP"
}
