import Foundation

/// A strict RFC 8259 JSON parser and a `Decoder` over its result, for the hot paths: Apple's
/// payloads in the verifier (`AppStoreJSON`) and the JSON documents the stores read from PostgreSQL.
///
/// Foundation's JSONDecoder cost about a quarter of a notification's verification (its string
/// scanning, generic container machinery and allocations); this one scans strings eight bytes
/// at a time and keeps objects as small arrays. It is stricter than Foundation, never looser:
/// exactly one value plus whitespace, no trailing commas, no leading zeros, no NaN/Infinity,
/// no control characters in strings, valid UTF-8, valid escapes (surrogates paired), no
/// duplicate keys (a duplicate could mean one thing to us and another to a later reader), at
/// most `maximumDepth` nested containers. Integers decode only from integer syntax; dates are
/// epoch milliseconds (as Apple writes them, and as the stores' queries render them).
public enum StrictJSON {
    /// Containers nested deeper than this are refused (a bound on the parser's recursion).
    public static let maximumDepth = 32

    /// A parsed JSON value. Not `indirect`: arrays already store their elements out of line,
    /// and boxing every scalar would cost an allocation per value.
    public enum Value: Sendable {
        case null
        case bool(Bool)
        /// Integer syntax that fits Int64.
        case integer(Int64)
        /// Any other number (finite).
        case double(Double)
        case string(String)
        case array([Value])
        /// Members in document order; keys are unique.
        case object([(key: String, value: Value)])

        var kind: String {
            switch self {
            case .null: "null"
            case .bool: "a boolean"
            case .integer, .double: "a number"
            case .string: "a string"
            case .array: "an array"
            case .object: "an object"
            }
        }
    }

    /// Why a document was refused (position in bytes).
    public struct SyntaxError: Error, Sendable, CustomStringConvertible {
        public let offset: Int
        public let reason: String
        public var description: String { "JSON syntax error at byte \(offset): \(reason)" }
    }

    /// Parses exactly one JSON value (with surrounding whitespace) from `bytes`.
    public static func parse(_ bytes: UnsafeBufferPointer<UInt8>) throws(SyntaxError) -> Value {
        var parser = Parser(bytes)
        parser.skipWhitespace()
        let value = try parser.value(depth: 0)
        parser.skipWhitespace()
        guard parser.index == bytes.count else { throw SyntaxError(offset: parser.index, reason: "data after the JSON value") }
        return value
    }

    /// Decodes `T` from a JSON document through Codable: type mismatches are errors, null is
    /// absent, unknown members are ignored.
    public static func decode<T: Decodable>(_ type: T.Type, from bytes: UnsafeBufferPointer<UInt8>) throws -> T {
        try parse(bytes).decode(T.self)
    }

    /// Decodes `T` from a JSON document through Codable, as `decode(_:from:)` on a buffer.
    public static func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        try bytes.withUnsafeBufferPointer { try decode(T.self, from: $0) }
    }

    private struct Parser {
        let bytes: UnsafeBufferPointer<UInt8>
        let base: UnsafePointer<UInt8>
        var index = 0

        init(_ bytes: UnsafeBufferPointer<UInt8>) {
            self.bytes = bytes
            // A dummy address for empty input: never read, since every read checks the count first.
            base = bytes.baseAddress ?? UnsafePointer(bitPattern: 1)!
        }

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch base[index] {
                case 0x20, 0x0A, 0x0D, 0x09: index += 1
                default: return
                }
            }
        }

        func fail(_ reason: String) -> SyntaxError { SyntaxError(offset: index, reason: reason) }

        mutating func value(depth: Int) throws(SyntaxError) -> Value {
            guard index < bytes.count else { throw fail("unexpected end of input") }
            switch base[index] {
            case UInt8(ascii: "{"): return try object(depth: depth + 1)
            case UInt8(ascii: "["): return try array(depth: depth + 1)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"):
                try literal("true")
                return .bool(true)
            case UInt8(ascii: "f"):
                try literal("false")
                return .bool(false)
            case UInt8(ascii: "n"):
                try literal("null")
                return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
            default: throw fail("unexpected character")
            }
        }

        mutating func literal(_ word: StaticString) throws(SyntaxError) {
            let count = word.utf8CodeUnitCount
            guard bytes.count - index >= count, memcmp(base + index, word.utf8Start, count) == 0 else { throw fail("invalid literal") }
            index += count
        }

        mutating func object(depth: Int) throws(SyntaxError) -> Value {
            guard depth <= StrictJSON.maximumDepth else { throw fail("nested deeper than \(StrictJSON.maximumDepth)") }
            index += 1  // {
            var members: [(key: String, value: Value)] = []
            members.reserveCapacity(12)  // Apple's objects have up to ~30 members; most fit without regrowing.
            skipWhitespace()
            if index < bytes.count && base[index] == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            }
            while true {
                guard index < bytes.count, base[index] == UInt8(ascii: "\"") else { throw fail("expected a member name") }
                let key = try string()
                if members.contains(where: { $0.key == key }) { throw fail("duplicate member name") }
                skipWhitespace()
                guard index < bytes.count, base[index] == UInt8(ascii: ":") else { throw fail("expected ':'") }
                index += 1
                skipWhitespace()
                members.append((key, try value(depth: depth)))
                skipWhitespace()
                guard index < bytes.count else { throw fail("unterminated object") }
                if base[index] == UInt8(ascii: ",") {
                    index += 1
                    skipWhitespace()
                } else if base[index] == UInt8(ascii: "}") {
                    index += 1
                    return .object(members)
                } else {
                    throw fail("expected ',' or '}'")
                }
            }
        }

        mutating func array(depth: Int) throws(SyntaxError) -> Value {
            guard depth <= StrictJSON.maximumDepth else { throw fail("nested deeper than \(StrictJSON.maximumDepth)") }
            index += 1  // [
            var elements: [Value] = []
            skipWhitespace()
            if index < bytes.count && base[index] == UInt8(ascii: "]") {
                index += 1
                return .array(elements)
            }
            while true {
                elements.append(try value(depth: depth))
                skipWhitespace()
                guard index < bytes.count else { throw fail("unterminated array") }
                if base[index] == UInt8(ascii: ",") {
                    index += 1
                    skipWhitespace()
                } else if base[index] == UInt8(ascii: "]") {
                    index += 1
                    return .array(elements)
                } else {
                    throw fail("expected ',' or ']'")
                }
            }
        }

        private static let ones: UInt64 = 0x0101_0101_0101_0101
        private static let highs: UInt64 = 0x8080_8080_8080_8080

        /// Whether none of the eight bytes is a quote, backslash, control character or non-ASCII
        /// (may answer false for a plain word; then the byte loop decides).
        @inline(__always) private static func plain(_ word: UInt64) -> Bool {
            let quote = word ^ (ones &* 0x22)
            let backslash = word ^ (ones &* 0x5C)
            let flags = word | ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash) | ((word &- ones &* 0x20) & ~word)
            return flags & highs == 0
        }

        /// A string starting at the opening quote; leaves `index` after the closing quote.
        mutating func string() throws(SyntaxError) -> String {
            index += 1
            let start = index
            var nonASCII = false
            // Fast path: eight bytes at a time while none is a quote, backslash, control
            // character or non-ASCII byte; the long base64 strings of Apple payloads stay here.
            while bytes.count - index >= 16 {
                let first = UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self)
                let second = UnsafeRawPointer(base + index + 8).loadUnaligned(as: UInt64.self)
                guard Self.plain(first) && Self.plain(second) else { break }
                index += 16
            }
            while bytes.count - index >= 8 {
                guard Self.plain(UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self)) else { break }
                index += 8
            }
            while index < bytes.count {
                let byte = base[index]
                if byte == UInt8(ascii: "\"") {
                    let text = UnsafeBufferPointer(start: base + start, count: index - start)
                    index += 1
                    return try makeString(text, nonASCII: nonASCII)
                }
                if byte == UInt8(ascii: "\\") { return try escapedString(from: start) }
                if byte < 0x20 { throw fail("control character in a string") }
                if byte >= 0x80 { nonASCII = true }
                index += 1
            }
            throw fail("unterminated string")
        }

        func makeString(_ text: UnsafeBufferPointer<UInt8>, nonASCII: Bool) throws(SyntaxError) -> String {
            guard nonASCII else { return String(decoding: text, as: UTF8.self) }
            guard let valid = String(validating: text, as: UTF8.self) else { throw fail("invalid UTF-8 in a string") }
            return valid
        }

        /// The rest of a string that holds escapes, collected byte by byte (rare in Apple data).
        mutating func escapedString(from start: Int) throws(SyntaxError) -> String {
            var out = Array(UnsafeBufferPointer(start: base + start, count: index - start))
            var nonASCII = out.contains { $0 >= 0x80 }
            while index < bytes.count {
                let byte = base[index]
                switch byte {
                case UInt8(ascii: "\""):
                    index += 1
                    return try out.withUnsafeBufferPointer { (text) throws(SyntaxError) -> String in try makeString(text, nonASCII: nonASCII) }
                case UInt8(ascii: "\\"):
                    index += 1
                    guard index < bytes.count else { throw fail("unterminated escape") }
                    let escape = base[index]
                    index += 1
                    switch escape {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(escape)
                    case UInt8(ascii: "b"): out.append(0x08)
                    case UInt8(ascii: "f"): out.append(0x0C)
                    case UInt8(ascii: "n"): out.append(0x0A)
                    case UInt8(ascii: "r"): out.append(0x0D)
                    case UInt8(ascii: "t"): out.append(0x09)
                    case UInt8(ascii: "u"):
                        var scalar = UInt32(try hex4())
                        if (0xD800...0xDBFF).contains(scalar) {
                            guard bytes.count - index >= 6, base[index] == UInt8(ascii: "\\"), base[index + 1] == UInt8(ascii: "u") else {
                                throw fail("unpaired high surrogate")
                            }
                            index += 2
                            let low = UInt32(try hex4())
                            guard (0xDC00...0xDFFF).contains(low) else { throw fail("unpaired high surrogate") }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        } else if (0xDC00...0xDFFF).contains(scalar) {
                            throw fail("unpaired low surrogate")
                        }
                        out.append(contentsOf: Array(String(Character(Unicode.Scalar(scalar)!)).utf8))
                        nonASCII = nonASCII || scalar >= 0x80
                    default: throw fail("invalid escape")
                    }
                default:
                    if byte < 0x20 { throw fail("control character in a string") }
                    if byte >= 0x80 { nonASCII = true }
                    out.append(byte)
                    index += 1
                }
            }
            throw fail("unterminated string")
        }

        mutating func hex4() throws(SyntaxError) -> UInt16 {
            guard bytes.count - index >= 4 else { throw fail("short \\u escape") }
            var value: UInt16 = 0
            for _ in 0..<4 {
                let byte = base[index]
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: throw fail("invalid \\u escape")
                }
                value = value << 4 | UInt16(digit)
                index += 1
            }
            return value
        }

        mutating func digits() -> Int {
            let start = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(base[index]) { index += 1 }
            return index - start
        }

        mutating func number() throws(SyntaxError) -> Value {
            let start = index
            if base[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(base[index]) else {
                throw fail("a number needs digits")
            }
            if base[index] == UInt8(ascii: "0") {
                index += 1
                if index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(base[index]) {
                    throw fail("leading zero in a number")
                }
            } else {
                _ = digits()
            }
            var integral = true
            if index < bytes.count && base[index] == UInt8(ascii: ".") {
                integral = false
                index += 1
                guard digits() > 0 else { throw fail("a fraction needs digits") }
            }
            if index < bytes.count && (base[index] == UInt8(ascii: "e") || base[index] == UInt8(ascii: "E")) {
                integral = false
                index += 1
                if index < bytes.count && (base[index] == UInt8(ascii: "+") || base[index] == UInt8(ascii: "-")) { index += 1 }
                guard digits() > 0 else { throw fail("an exponent needs digits") }
            }
            let text = UnsafeBufferPointer(start: base + start, count: index - start)
            if integral, let integer = Self.int64(text) { return .integer(integer) }
            guard let double = Double(String(decoding: text, as: UTF8.self)), double.isFinite else {
                throw fail("number out of range")
            }
            // An underflow is out of range too (17959E-79133003 is not 0): Foundation refuses it.
            let mantissa = text.prefix { $0 != UInt8(ascii: "e") && $0 != UInt8(ascii: "E") }
            if double.isSubnormal || (double == 0 && mantissa.contains(where: { (UInt8(ascii: "1")...UInt8(ascii: "9")).contains($0) })) {
                throw fail("number out of range")
            }
            return .double(double)
        }

        /// Integer syntax (already validated) as Int64, nil when out of range.
        static func int64(_ text: UnsafeBufferPointer<UInt8>) -> Int64? {
            var negative = false
            var index = 0
            if text[0] == UInt8(ascii: "-") {
                negative = true
                index = 1
            }
            var magnitude: UInt64 = 0
            while index < text.count {
                let (times10, overflow1) = magnitude.multipliedReportingOverflow(by: 10)
                let (sum, overflow2) = times10.addingReportingOverflow(UInt64(text[index] - UInt8(ascii: "0")))
                if overflow1 || overflow2 { return nil }
                magnitude = sum
                index += 1
            }
            if negative {
                if magnitude == UInt64(Int64.max) + 1 { return Int64.min }
                return magnitude <= UInt64(Int64.max) ? -Int64(magnitude) : nil
            }
            return magnitude <= UInt64(Int64.max) ? Int64(magnitude) : nil
        }
    }
}
