import Foundation
import StrictJSON

/// JSON coding of Apple payloads: dates are integer milliseconds since 1970.
public enum AppStoreJSON {
    /// One Foundation decoder for non-hot paths (JSONDecoder is Sendable; its options never change).
    static let sharedDecoder = decoder()

    /// Decodes an Apple payload with the strict, fast parser the verifier uses: RFC 8259 only,
    /// no duplicate member names, valid UTF-8, integers only from integer syntax, dates from
    /// epoch milliseconds, unknown fields ignored.
    public static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        try bytes.withUnsafeBufferPointer { try StrictJSON.decodeFast(T.self, from: $0) }
    }

    /// A decoder for Apple payloads (dates from epoch milliseconds; unknown fields ignored).
    public static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .millisecondsSince1970
        return decoder
    }

    /// An encoder writing dates as whole epoch milliseconds, as Apple does, with sorted keys.
    public static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            let milliseconds = (date.timeIntervalSince1970 * 1000).rounded()
            // Out-of-range dates (hostile input) stay numbers instead of trapping in Int64(_:).
            if let exact = Int64(exactly: milliseconds) { try container.encode(exact) } else { try container.encode(milliseconds) }
        }
        return encoder
    }

    /// `date` as whole epoch milliseconds in decimal, as Apple's query parameters want it.
    static func milliseconds(_ date: Date) -> String {
        let milliseconds = (date.timeIntervalSince1970 * 1000).rounded(.down)
        return Int64(exactly: milliseconds).map(String.init) ?? "0"
    }
}
