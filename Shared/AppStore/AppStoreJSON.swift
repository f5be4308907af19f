import Foundation

/// JSON coding of Apple payloads: dates are integer milliseconds since 1970.
public enum AppStoreJSON {
    /// One decoder for the verifier's hot path (JSONDecoder is Sendable; its options never change).
    static let sharedDecoder = decoder()

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
