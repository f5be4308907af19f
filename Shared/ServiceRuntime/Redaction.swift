import Foundation

/// The rule that keeps secrets out of logs: sensitive keys are masked whatever their value,
/// and values shaped like a JWS or a URL with a password are masked under any key.
public enum Redaction {
    /// Fragments of metadata keys whose values are never logged.
    static let sensitiveKeyFragments = [
        "password", "passwd", "secret", "token", "authorization", "cookie", "private", "signedpayload",
        "signedtransaction", "signedrenewal", "jws", "apikey", "api_key", "encryptionkey", "email", "phone",
    ]
    public static let mask = "[REDACTED]"

    public static func redact(key: String, value: LogValue) -> LogValue {
        let lowered = key.lowercased()
        if sensitiveKeyFragments.contains(where: { lowered.contains($0) }) { return .string(mask) }
        if case .string(let s) = value { return .string(scrub(s)) }
        return value
    }

    /// Masks JWS-shaped tokens, bearer credentials and URL passwords inside free text.
    public static func scrub(_ text: String) -> String {
        guard text.contains(".") || text.contains("@") || text.contains("Bearer") else { return text }
        var words = text.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        var changed = false
        for i in words.indices {
            let w = words[i]
            if looksLikeJWS(w) {
                words[i] = mask
                changed = true
            } else if let masked = maskURLPassword(w) {
                words[i] = masked
                changed = true
            } else if i > 0, words[i - 1] == "Bearer" {
                words[i] = mask
                changed = true
            }
        }
        return changed ? words.joined(separator: " ") : text
    }

    /// Three dot-separated base64url segments, the first starting like a JSON header (`eyJ`).
    static func looksLikeJWS(_ word: String) -> Bool {
        guard word.count >= 20, let start = word.range(of: "eyJ") else { return false }
        let token = word[start.lowerBound...]
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count >= 2 else { return false }
        return parts.prefix(2).allSatisfy { part in
            !part.isEmpty && part.unicodeScalars.allSatisfy { $0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-" || $0 == "_" }
        }
    }

    static func maskURLPassword(_ word: String) -> String? {
        guard let scheme = word.range(of: "://"), let at = word.range(of: "@", range: scheme.upperBound..<word.endIndex),
            let colon = word.range(of: ":", range: scheme.upperBound..<at.lowerBound)
        else { return nil }
        return String(word[..<colon.upperBound]) + mask + String(word[at.lowerBound...])
    }
}
