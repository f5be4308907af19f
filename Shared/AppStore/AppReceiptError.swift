/// Why a StoreKit 1 app receipt was refused: one of a closed set of stable codes, plus a reason
/// for operators (never the receipt itself).
public struct AppReceiptError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The stable codes; clients and dashboards key on `rawValue`, never on `reason`.
    public enum Code: String, Sendable, Hashable, CaseIterable {
        /// Not an app receipt: not base64, not one PKCS#7 SignedData with data content and one
        /// signer (truncated, trailing bytes), or a payload that is not Apple's attribute set.
        case invalid = "RECEIPT_INVALID"
        /// The signature does not verify, or the signer does not chain (leaf and intermediate
        /// with Apple's marker OIDs) to a configured root at the verification date, or it is
        /// revoked (online checks).
        case untrusted = "RECEIPT_UNTRUSTED"
        /// A genuine receipt of another app: its bundle id is not the configured one.
        case bundleMismatch = "RECEIPT_BUNDLE_MISMATCH"
        /// A genuine receipt of an environment this deployment does not serve (a Production
        /// receipt on a Sandbox deployment), or of a type Apple does not document.
        case environmentMismatch = "RECEIPT_ENVIRONMENT_MISMATCH"
        /// An Xcode (or LocalTesting) receipt, signed locally by StoreKit testing, while
        /// APPLE_IAP_ALLOW_XCODE is off.
        case xcodeNotAllowed = "RECEIPT_XCODE_NOT_ALLOWED"
        /// A verified receipt holding no in-app purchase with a transaction id.
        case noTransaction = "RECEIPT_NO_TRANSACTION"
        /// The online revocation check could not be completed; trying again later may succeed.
        case retryable = "RECEIPT_RETRYABLE"
    }

    public let code: Code
    public let reason: String

    public init(_ code: Code, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    /// Whether the same receipt may verify later; false means refuse it for good.
    public var isRetryable: Bool { code == .retryable }

    public var description: String { "\(code.rawValue): \(reason)" }
}
