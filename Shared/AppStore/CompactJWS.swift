import Crypto
import Foundation

/// The three segments of a compact JWS (RFC 7515 §7.1) located in the token's UTF-8 bytes;
/// nothing is decoded yet. The buffers live only inside `withSegments`: do not escape them.
struct CompactJWS {
    /// Far above any Apple payload (notifications are ~20 KB) and low enough that an oversized
    /// body is refused before any decoding work.
    static let maximumLength = 256 * 1024

    let header: UnsafeBufferPointer<UInt8>
    let payload: UnsafeBufferPointer<UInt8>
    let signature: UnsafeBufferPointer<UInt8>
    /// ASCII of `header.payload` exactly as received: what the signature covers.
    let signingInput: UnsafeBufferPointer<UInt8>

    /// Runs `body` with the segments of `token`, in place (no copy of the token's bytes).
    static func withSegments<R>(of token: String, _ body: (CompactJWS) throws(VerificationError) -> R)
        throws(VerificationError) -> R
    {
        guard token.utf8.count <= maximumLength else {
            throw VerificationError(.malformed, "token of \(token.utf8.count) bytes exceeds the \(maximumLength)-byte limit")
        }
        var token = token
        let result: Result<R, VerificationError> = token.withUTF8 { utf8 in
            Result { () throws(VerificationError) -> R in try body(try CompactJWS(utf8)) }
        }
        return try result.get()
    }

    private init(_ utf8: UnsafeBufferPointer<UInt8>) throws(VerificationError) {
        guard let base = utf8.baseAddress, let (first, second) = Self.dots(in: utf8) else {
            throw VerificationError(.malformed, "a compact JWS has exactly three dot-separated segments")
        }
        header = UnsafeBufferPointer(start: base, count: first)
        payload = UnsafeBufferPointer(start: base + first + 1, count: second - first - 1)
        signature = UnsafeBufferPointer(start: base + second + 1, count: utf8.count - second - 1)
        signingInput = UnsafeBufferPointer(start: base, count: second)
    }

    /// The offsets of the two dots of a compact JWS; nil unless there are exactly two.
    static func dots(in utf8: UnsafeBufferPointer<UInt8>) -> (first: Int, second: Int)? {
        guard let first = dot(in: utf8, from: 0), let second = dot(in: utf8, from: first + 1),
            dot(in: utf8, from: second + 1) == nil
        else { return nil }
        return (first, second)
    }

    private static func dot(in utf8: UnsafeBufferPointer<UInt8>, from start: Int) -> Int? {
        guard start < utf8.count, let found = memchr(utf8.baseAddress! + start, Int32(UInt8(ascii: ".")), utf8.count - start)
        else { return nil }
        return utf8.baseAddress!.distance(to: found.assumingMemoryBound(to: UInt8.self))
    }

    /// Decodes one base64url segment (empty allowed: an absent signature is refused later as such).
    static func decode(_ segment: UnsafeBufferPointer<UInt8>, _ name: String) throws(VerificationError) -> [UInt8] {
        guard let bytes = Base64URL.decode(bytes: segment) else {
            throw VerificationError(.malformed, "the \(name) segment is not unpadded base64url")
        }
        return bytes
    }
}

/// The protected-header fields this verifier reads.
struct JWSHeader: Decodable {
    let alg: String?
    let x5c: [String]?
    let crit: [String]?

    static func decode(_ segment: UnsafeBufferPointer<UInt8>) throws(VerificationError) -> JWSHeader {
        let bytes = try CompactJWS.decode(segment, "header")
        do {
            return try AppStoreJSON.decode(JWSHeader.self, from: bytes)
        } catch {
            throw VerificationError(.malformed, "the protected header is not a JSON object of the JWS header fields")
        }
    }
}

/// A header that passed the algorithm checks, with its x5c certificates decoded and fingerprinted.
struct SigningHeader {
    /// DER of x5c[0] (leaf), x5c[1] (intermediate), x5c[2] (root).
    let certificates: [[UInt8]]
    let chainKey: ChainCache.Key
    let rootFingerprint: [UInt8]

    init(x5c: [String]?) throws(VerificationError) {
        guard let x5c, x5c.count == 3 else {
            throw VerificationError(.invalidChain, "x5c must hold exactly 3 certificates, got \(x5c?.count ?? 0)")
        }
        var certificates: [[UInt8]] = []
        for (index, text) in x5c.enumerated() {
            guard let bytes = Data(base64Encoded: text), !bytes.isEmpty else {
                throw VerificationError(.invalidChain, "x5c[\(index)] is not base64")
            }
            certificates.append([UInt8](bytes))
        }
        self.certificates = certificates
        chainKey = ChainCache.Key(leaf: SHA256.hash(certificates[0]), intermediate: SHA256.hash(certificates[1]))
        rootFingerprint = SHA256.hash(certificates[2])
    }
}

/// The three dot-separated segments of a compact JWS as text, nothing checked: for code that
/// reads a part without verifying it here (a claim that only chooses how to verify, a payload
/// printed after verification, a bearer token checked with its own key). The verifier itself
/// works on `CompactJWS`, in place.
public struct JWSParts: Sendable {
    public let header: Substring
    public let payload: Substring
    public let signature: Substring

    /// Nil unless `token` has exactly three segments (empty ones allowed).
    public init?(_ token: String) {
        // Found in the contiguous UTF-8 bytes, as the verifier does: splitting by Character walked
        // grapheme clusters (over half of the ingress's CPU per 12 KB notification), and a walk of
        // the String.UTF8View still cost 7 % of it (perf). A "." byte is always a whole character,
        // so its offset is a valid String index.
        var token = token
        guard let (first, second) = token.withUTF8({ CompactJWS.dots(in: $0) }) else { return nil }
        let bytes = token.utf8
        let firstDot = bytes.index(bytes.startIndex, offsetBy: first)
        let secondDot = bytes.index(bytes.startIndex, offsetBy: second)
        header = token[..<firstDot]
        payload = token[bytes.index(after: firstDot)..<secondDot]
        signature = token[bytes.index(after: secondDot)...]
    }

    /// `header.payload` exactly as received: what the signature covers.
    public var signingInput: Substring { header.base[header.startIndex..<payload.endIndex] }

    /// The payload segment decoded and parsed as JSON, nil when it is not base64url JSON.
    public var payloadJSON: Any? {
        guard let bytes = Base64URL.decode(payload) else { return nil }
        return try? JSONSerialization.jsonObject(with: Data(bytes))
    }
}
