/// The rule that keeps secrets out of logs: sensitive keys are masked whatever their value,
/// and values shaped like a JWS or a URL with a password are masked under any key.
///
/// Every log line goes through here, so the checks work on UTF-8 bytes: Foundation's string
/// search (`contains`, `range(of:)`) cost more than rendering the rest of the line.
public enum Redaction {
    /// Fragments of metadata keys whose values are never logged (lowercase ASCII).
    static let sensitiveKeyFragments = [
        "password", "passwd", "secret", "token", "authorization", "cookie", "private", "signedpayload",
        "signedtransaction", "signedrenewal", "jws", "apikey", "api_key", "encryptionkey", "email", "phone",
    ].map { Array($0.utf8) }
    public static let mask = "[REDACTED]"

    public static func redact(key: String, value: LogValue) -> LogValue {
        if isSensitive(key: key) { return .string(mask) }
        if case .string(let s) = value { return .string(scrub(s)) }
        return value
    }

    /// True when the key, case aside, contains one of the sensitive fragments.
    static func isSensitive(key: String) -> Bool {
        let lowered = key.utf8.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }
        return sensitiveKeyFragments.contains { find($0, in: lowered[...]) != nil }
    }

    /// Masks JWS-shaped tokens, bearer credentials and URL passwords inside free text.
    public static func scrub(_ text: String) -> String {
        let bytes = Array(text.utf8)
        // Each rule needs a dot (JWS), an at sign (URL password) or the word Bearer.
        guard bytes.contains(where: { $0 == 0x2E || $0 == 0x40 }) || find(bearer, in: bytes[...]) != nil else {
            return text
        }
        let words = bytes.split(separator: 0x20, omittingEmptySubsequences: false)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var changed = false
        for (index, word) in words.enumerated() {
            if index > 0 { out.append(0x20) }
            if looksLikeJWS(word) || (index > 0 && words[index - 1].elementsEqual(bearer)) {
                out += maskBytes
                changed = true
            } else if let masked = maskURLPassword(word) {
                out += masked
                changed = true
            } else {
                out += word
            }
        }
        return changed ? String(decoding: out, as: UTF8.self) : text
    }

    private static let bearer = Array("Bearer".utf8)
    private static let maskBytes = Array(mask.utf8)

    /// Three dot-separated base64url segments, the first starting like a JSON header (`eyJ`).
    /// Bytes outside ASCII count as segment characters: in doubt, mask.
    static func looksLikeJWS(_ word: ArraySlice<UInt8>) -> Bool {
        guard word.count >= 20, let start = find(Array("eyJ".utf8), in: word) else { return false }
        let parts = word[start...].split(separator: 0x2E, maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2 else { return false }
        return parts.prefix(2).allSatisfy { part in
            !part.isEmpty
                && part.allSatisfy { byte in
                    switch byte {
                    case 0x30...0x39, 0x41...0x5A, 0x61...0x7A, 0x2D, 0x5F, 0x80...: true
                    default: false
                    }
                }
        }
    }

    static func maskURLPassword(_ word: ArraySlice<UInt8>) -> [UInt8]? {
        guard let scheme = find(Array("://".utf8), in: word),
            let at = word[(scheme + 3)...].firstIndex(of: 0x40),
            let colon = word[(scheme + 3)..<at].firstIndex(of: 0x3A)
        else { return nil }
        return Array(word[...colon]) + maskBytes + Array(word[at...])
    }

    /// Index in `haystack` where `needle` starts, if it occurs.
    private static func find(_ needle: [UInt8], in haystack: ArraySlice<UInt8>) -> Int? {
        guard let first = needle.first, haystack.count >= needle.count else { return nil }
        var index = haystack.startIndex
        let last = haystack.endIndex - needle.count
        while index <= last {
            if haystack[index] == first, haystack[index..<(index + needle.count)].elementsEqual(needle) { return index }
            index += 1
        }
        return nil
    }
}
