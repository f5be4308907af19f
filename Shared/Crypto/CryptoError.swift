import COpenSSL

/// A failure of a cryptographic operation, with OpenSSL's own explanation when it gave one.
public struct CryptoError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What kind of failure: an open set, so a new case never breaks a caller's `switch`.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        private init(_ rawValue: String) { self.rawValue = rawValue }

        /// Input bytes or text that do not parse (PEM, DER, sizes).
        public static let invalidInput = Code("invalidInput")
        /// A key of the wrong type, curve or size.
        public static let invalidKey = Code("invalidKey")
        /// Authenticated decryption failed: wrong key, wrong AAD or tampered data.
        public static let authenticationFailure = Code("authenticationFailure")
        /// A certificate chain did not verify against the trusted roots.
        public static let chainVerificationFailed = Code("chainVerificationFailed")
        /// A signature did not verify with the key it names.
        public static let signatureVerificationFailed = Code("signatureVerificationFailed")
        /// OpenSSL failed where it should not (allocation, provider missing).
        public static let internalFailure = Code("internalFailure")

        public var description: String { rawValue }
    }

    public let code: Code
    /// What we were doing, plus OpenSSL's error string when there is one.
    public let reason: String

    package init(_ code: Code, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    /// An error whose reason ends with OpenSSL's queued errors for this thread (then cleared).
    package static func openSSL(_ code: Code, _ what: String) -> CryptoError {
        guard let detail = OpenSSLErrorQueue.drain() else { return CryptoError(code, what) }
        return CryptoError(code, "\(what): \(detail)")
    }

    public var description: String { "\(code): \(reason)" }
}

/// OpenSSL reports errors on a per-thread queue; every failure path drains it so a stale entry
/// never shows up in the error of a later, unrelated call on the same thread.
enum OpenSSLErrorQueue {
    static func drain() -> String? {
        var messages: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            messages.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return messages.isEmpty ? nil : messages.joined(separator: "; ")
    }

    static func clear() { ERR_clear_error() }
}
