import Crypto
import Foundation

/// A compact-serialised JWS split into its parts, nothing verified yet (RFC 7515 §7.1).
struct CompactJWS {
    /// Far above any Apple payload (notifications are ~20 KB) and low enough that an oversized
    /// body is refused before any decoding work.
    static let maximumLength = 256 * 1024

    struct Header: Decodable {
        let alg: String?
        let x5c: [String]?
        let crit: [String]?
    }

    let header: Header
    let payload: [UInt8]
    let signature: [UInt8]
    /// ASCII of `header.payload` exactly as received: what the signature covers.
    let signingInput: [UInt8]

    init(_ token: String) throws(VerificationError) {
        let utf8 = token.utf8
        guard utf8.count <= Self.maximumLength else {
            throw VerificationError(.malformed, "token of \(utf8.count) bytes exceeds the \(Self.maximumLength)-byte limit")
        }
        var dots: [String.UTF8View.Index] = []
        var index = utf8.startIndex
        while index != utf8.endIndex {
            if utf8[index] == UInt8(ascii: ".") {
                dots.append(index)
                if dots.count > 2 { break }
            }
            index = utf8.index(after: index)
        }
        guard dots.count == 2 else {
            throw VerificationError(.malformed, "a compact JWS has exactly three dot-separated segments")
        }
        let headerText = utf8[utf8.startIndex..<dots[0]]
        let payloadText = utf8[utf8.index(after: dots[0])..<dots[1]]
        let signatureText = utf8[utf8.index(after: dots[1])...]
        guard let headerBytes = Base64URL.decode(bytes: headerText), !headerBytes.isEmpty,
            let payload = Base64URL.decode(bytes: payloadText), !payload.isEmpty,
            let signature = Base64URL.decode(bytes: signatureText)
        else { throw VerificationError(.malformed, "a segment is empty or not unpadded base64url") }
        // An empty signature (alg "none") parses: the algorithm check refuses it as a signature problem.
        do {
            header = try JSONDecoder().decode(Header.self, from: Data(headerBytes))
        } catch {
            throw VerificationError(.malformed, "the protected header is not a JSON object of the JWS header fields")
        }
        self.payload = payload
        self.signature = signature
        signingInput = Array(utf8[utf8.startIndex..<dots[1]])
    }
}
