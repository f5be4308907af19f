import Foundation

/// A strict RFC 8259 JSON parser and a `Decoder` over its result, for the verifier's hot path.
///
/// Foundation's JSONDecoder cost about a quarter of a notification's verification (its string
/// scanning, generic container machinery and allocations); this one scans strings eight bytes
/// at a time and keeps objects as small arrays. It is stricter than Foundation, never looser:
/// exactly one value plus whitespace, no trailing commas, no leading zeros, no NaN/Infinity,
/// no control characters in strings, valid UTF-8, valid escapes (surrogates paired), no
/// duplicate keys (a duplicate could mean one thing to us and another to a later reader), at
/// most `maximumDepth` nested containers. Integers decode only from integer syntax; dates are
/// epoch milliseconds, as in `AppStoreJSON`.
enum StrictJSON {
    static let maximumDepth = 32

    /// A parsed JSON value. Not `indirect`: arrays already store their elements out of line,
    /// and boxing every scalar would cost an allocation per value.
    enum Value {
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
    struct SyntaxError: Error, CustomStringConvertible {
        let offset: Int
        let reason: String
        var description: String { "JSON syntax error at byte \(offset): \(reason)" }
    }

    static func parse(_ bytes: UnsafeBufferPointer<UInt8>) throws(SyntaxError) -> Value {
        var parser = Parser(bytes)
        parser.skipWhitespace()
        let value = try parser.value(depth: 0)
        parser.skipWhitespace()
        guard parser.index == bytes.count else { throw SyntaxError(offset: parser.index, reason: "data after the JSON value") }
        return value
    }

    /// Decodes `T` from a JSON document through Codable (`decodeFast` takes hand-written
    /// paths where there are some).
    static func decode<T: Decodable>(_ type: T.Type, from bytes: UnsafeBufferPointer<UInt8>) throws -> T {
        try T(from: ValueDecoder(value: try parse(bytes), codingPath: []))
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

// MARK: Decoder

/// A `Decoder` over a parsed `StrictJSON.Value`.
private struct ValueDecoder: Decoder {
    let value: StrictJSON.Value
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = value else { throw mismatch(Dictionary<String, Any>.self, value, codingPath) }
        return KeyedDecodingContainer(KeyedContainer(members: members, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let elements) = value else { throw mismatch([Any].self, value, codingPath) }
        return UnkeyedContainer(elements: elements, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { SingleValueContainer(value: value, codingPath: codingPath) }
}

private func mismatch(_ type: Any.Type, _ value: StrictJSON.Value, _ path: [any CodingKey]) -> DecodingError {
    DecodingError.typeMismatch(type, .init(codingPath: path, debugDescription: "expected \(type), found \(value.kind)"))
}

/// Where a value sits: its container's path plus its own key, joined only when needed (an
/// error or a nested container), since building a path array for every field costs an
/// allocation per field.
private struct PathToValue {
    let parent: [any CodingKey]
    let key: (any CodingKey)?

    var path: [any CodingKey] { key.map { parent + [$0] } ?? parent }
}

/// Decodes one value as `T`: the scalar types directly, `Date` from epoch milliseconds,
/// everything else through its own `init(from:)`.
private func decodeValue<T: Decodable>(_ type: T.Type, _ value: StrictJSON.Value, _ path: [any CodingKey]) throws -> T {
    try decodeValue(T.self, value, PathToValue(parent: path, key: nil))
}

private func decodeValue<T: Decodable>(_ type: T.Type, _ value: StrictJSON.Value, _ at: PathToValue) throws -> T {
    if T.self == String.self {
        guard case .string(let string) = value else { throw mismatch(T.self, value, at.path) }
        return string as! T
    }
    if T.self == Date.self {
        let milliseconds: Double
        switch value {
        case .integer(let integer): milliseconds = Double(integer)
        case .double(let double): milliseconds = double
        default: throw mismatch(T.self, value, at.path)
        }
        return Date(timeIntervalSince1970: milliseconds / 1000) as! T
    }
    if T.self == Int64.self { return try integer(Int64.self, value, at) as! T }
    if T.self == Int32.self { return try integer(Int32.self, value, at) as! T }
    if T.self == Int.self { return try integer(Int.self, value, at) as! T }
    if T.self == Bool.self {
        guard case .bool(let bool) = value else { throw mismatch(T.self, value, at.path) }
        return bool as! T
    }
    if T.self == Double.self { return try double(value, at.path) as! T }
    return try T(from: ValueDecoder(value: value, codingPath: at.path))
}

private func integer<I: FixedWidthInteger>(_ type: I.Type, _ value: StrictJSON.Value, _ path: [any CodingKey]) throws -> I {
    try integer(I.self, value, PathToValue(parent: path, key: nil))
}

private func integer<I: FixedWidthInteger>(_ type: I.Type, _ value: StrictJSON.Value, _ at: PathToValue) throws -> I {
    guard case .integer(let integer) = value else { throw mismatch(I.self, value, at.path) }
    guard let exact = I(exactly: integer) else {
        throw DecodingError.dataCorrupted(.init(codingPath: at.path, debugDescription: "\(integer) does not fit \(I.self)"))
    }
    return exact
}

private func double(_ value: StrictJSON.Value, _ path: [any CodingKey]) throws -> Double {
    switch value {
    case .integer(let integer): Double(integer)
    case .double(let double): double
    default: throw mismatch(Double.self, value, path)
    }
}

private struct KeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let members: [(key: String, value: StrictJSON.Value)]
    let codingPath: [any CodingKey]

    var allKeys: [Key] { members.compactMap { Key(stringValue: $0.key) } }

    func lookup(_ key: Key) -> StrictJSON.Value? {
        let name = key.stringValue
        for member in members where member.key == name { return member.value }
        return nil
    }

    func require(_ key: Key) throws -> StrictJSON.Value {
        guard let value = lookup(key) else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no member \(key.stringValue)"))
        }
        return value
    }

    func contains(_ key: Key) -> Bool { lookup(key) != nil }

    func decodeNil(forKey key: Key) throws -> Bool {
        if case .null = try require(key) { return true }
        return false
    }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try decodeValue(T.self, try require(key), PathToValue(parent: codingPath, key: key))
    }

    func decodeIfPresent<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T? {
        guard let value = lookup(key) else { return nil }
        if case .null = value { return nil }
        return try decodeValue(T.self, value, PathToValue(parent: codingPath, key: key))
    }

    // The concrete overloads route to the generic ones (which special-case these types).
    func decodeIfPresent(_ type: String.Type, forKey key: Key) throws -> String? { try decodeIfPresent(String.self as String.Type, key) }
    func decodeIfPresent(_ type: Int64.Type, forKey key: Key) throws -> Int64? { try decodeIfPresent(Int64.self as Int64.Type, key) }
    func decodeIfPresent(_ type: Int32.Type, forKey key: Key) throws -> Int32? { try decodeIfPresent(Int32.self as Int32.Type, key) }
    func decodeIfPresent(_ type: Bool.Type, forKey key: Key) throws -> Bool? { try decodeIfPresent(Bool.self as Bool.Type, key) }
    private func decodeIfPresent<T: Decodable>(_ type: T.Type, _ key: Key) throws -> T? {
        guard let value = lookup(key) else { return nil }
        if case .null = value { return nil }
        return try decodeValue(T.self, value, PathToValue(parent: codingPath, key: key))
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws
        -> KeyedDecodingContainer<NestedKey>
    {
        try ValueDecoder(value: try require(key), codingPath: codingPath + [key]).container(keyedBy: NestedKey.self)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try ValueDecoder(value: try require(key), codingPath: codingPath + [key]).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "superDecoder is not supported"))
    }

    func superDecoder(forKey key: Key) throws -> any Decoder { try superDecoder() }
}

private struct IndexKey: CodingKey {
    let intValue: Int?
    var stringValue: String { "Index \(intValue ?? 0)" }
    init(intValue: Int) { self.intValue = intValue }
    init?(stringValue: String) { nil }
}

private struct UnkeyedContainer: UnkeyedDecodingContainer {
    let elements: [StrictJSON.Value]
    let codingPath: [any CodingKey]
    var currentIndex = 0

    init(elements: [StrictJSON.Value], codingPath: [any CodingKey]) {
        self.elements = elements
        self.codingPath = codingPath
    }

    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    mutating func next() throws -> (StrictJSON.Value, [any CodingKey]) {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(Any.self, .init(codingPath: codingPath, debugDescription: "array exhausted"))
        }
        defer { currentIndex += 1 }
        return (elements[currentIndex], codingPath + [IndexKey(intValue: currentIndex)])
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, case .null = elements[currentIndex] else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let (value, path) = try next()
        return try decodeValue(T.self, value, path)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        let (value, path) = try next()
        return try ValueDecoder(value: value, codingPath: path).container(keyedBy: NestedKey.self)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let (value, path) = try next()
        return try ValueDecoder(value: value, codingPath: path).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "superDecoder is not supported"))
    }
}

private struct SingleValueContainer: SingleValueDecodingContainer {
    let value: StrictJSON.Value
    let codingPath: [any CodingKey]

    func decodeNil() -> Bool {
        if case .null = value { return true }
        return false
    }

    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decodeValue(T.self, value, codingPath) }
    func decode(_ type: String.Type) throws -> String { try decodeValue(String.self, value, codingPath) }
    func decode(_ type: Bool.Type) throws -> Bool { try decodeValue(Bool.self, value, codingPath) }
    func decode(_ type: Int64.Type) throws -> Int64 { try decodeValue(Int64.self, value, codingPath) }
    func decode(_ type: Int32.Type) throws -> Int32 { try decodeValue(Int32.self, value, codingPath) }
    func decode(_ type: Int.Type) throws -> Int { try decodeValue(Int.self, value, codingPath) }
    func decode(_ type: Double.Type) throws -> Double { try double(value, codingPath) }
    func decode(_ type: Float.Type) throws -> Float { Float(try double(value, codingPath)) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(UInt64.self, value, codingPath) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(UInt32.self, value, codingPath) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(UInt16.self, value, codingPath) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(UInt8.self, value, codingPath) }
    func decode(_ type: UInt.Type) throws -> UInt { try integer(UInt.self, value, codingPath) }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer(Int16.self, value, codingPath) }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer(Int8.self, value, codingPath) }
}

// MARK: Hand-written decoding of the notification payload

/// The outer notification and its `data` decoded member by member, without Codable's generic
/// containers: the one payload every incoming request carries. Same rules as `decodeValue`
/// (type mismatches are errors, null is absent, unknown members are ignored); the rarer
/// `summary`, `externalPurchaseToken` and `appData` objects go through Codable. The
/// equivalence with Foundation's JSONDecoder is checked by the model and fuzz tests.
extension ResponseBodyV2DecodedPayload {
    init(strictJSON value: StrictJSON.Value) throws {
        guard case .object(let members) = value else { throw mismatch(Self.self, value, []) }
        self.init()
        for (key, member) in members {
            if case .null = member { continue }
            switch key {
            case "notificationType": rawNotificationType = try string(member, key)
            case "subtype": rawSubtype = try string(member, key)
            case "notificationUUID": notificationUUID = try string(member, key)
            case "version": version = try string(member, key)
            case "signedDate": signedDate = try decodeValue(Date.self, member, [NotificationKey(key)])
            case "data": data = try NotificationData(strictJSON: member)
            case "summary": summary = try decodeValue(Summary.self, member, [NotificationKey(key)])
            case "externalPurchaseToken": externalPurchaseToken = try decodeValue(ExternalPurchaseToken.self, member, [NotificationKey(key)])
            case "appData": appData = try decodeValue(AppData.self, member, [NotificationKey(key)])
            default: continue
            }
        }
    }
}

extension NotificationData {
    init(strictJSON value: StrictJSON.Value) throws {
        guard case .object(let members) = value else { throw mismatch(Self.self, value, [NotificationKey("data")]) }
        self.init()
        for (key, member) in members {
            if case .null = member { continue }
            switch key {
            case "environment": rawEnvironment = try string(member, key)
            case "appAppleId": appAppleId = try integer(Int64.self, member, [NotificationKey("data"), NotificationKey(key)])
            case "bundleId": bundleId = try string(member, key)
            case "bundleVersion": bundleVersion = try string(member, key)
            case "signedTransactionInfo": signedTransactionInfo = try string(member, key)
            case "signedRenewalInfo": signedRenewalInfo = try string(member, key)
            case "status": rawStatus = try integer(Int32.self, member, [NotificationKey("data"), NotificationKey(key)])
            case "consumptionRequestReason": rawConsumptionRequestReason = try string(member, key)
            default: continue
            }
        }
    }
}

private func string(_ value: StrictJSON.Value, _ key: String) throws -> String {
    guard case .string(let string) = value else { throw mismatch(String.self, value, [NotificationKey(key)]) }
    return string
}

/// A coding key for error paths of the hand-written decoding.
private struct NotificationKey: CodingKey {
    let stringValue: String
    init(_ name: String) { stringValue = name }
    init?(stringValue: String) { self.stringValue = stringValue }
    var intValue: Int? { nil }
    init?(intValue: Int) { nil }
}

extension StrictJSON {
    /// Decodes `T`, through the hand-written path when there is one.
    static func decodeFast<T: Decodable>(_ type: T.Type, from bytes: UnsafeBufferPointer<UInt8>) throws -> T {
        let value = try parse(bytes)
        if T.self == ResponseBodyV2DecodedPayload.self { return try ResponseBodyV2DecodedPayload(strictJSON: value) as! T }
        return try T(from: ValueDecoder(value: value, codingPath: []))
    }
}
