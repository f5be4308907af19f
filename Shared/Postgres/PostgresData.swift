import CPostgres
import Foundation
import ServiceRuntime

/// The type OID announced for a bound value, so the server need not guess it
/// (`$1 IS NULL`, `jsonb_build_object(..., $1)` and `unnest($1)` only work with a known type).
public struct PostgresDataType: RawRepresentable, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }

    /// Let the server infer the type from the context (what strings use: they fit any column type).
    public static let unspecified = PostgresDataType(rawValue: 0)
    public static let bool = PostgresDataType(rawValue: 16)
    public static let bytea = PostgresDataType(rawValue: 17)
    public static let int8 = PostgresDataType(rawValue: 20)
    public static let int4 = PostgresDataType(rawValue: 23)
    public static let text = PostgresDataType(rawValue: 25)
    public static let float8 = PostgresDataType(rawValue: 701)
    public static let timestamptz = PostgresDataType(rawValue: 1184)
    public static let numeric = PostgresDataType(rawValue: 1700)
    public static let uuid = PostgresDataType(rawValue: 2950)
    public static let jsonb = PostgresDataType(rawValue: 3802)

    /// The type of an array of this type; arrays of unspecified elements are `text[]`.
    var arrayType: PostgresDataType {
        let arrays: [UInt32: UInt32] = [
            0: 1009, 16: 1000, 17: 1001, 20: 1016, 23: 1007, 25: 1009, 701: 1022, 1184: 1185, 1700: 1231,
            2950: 2951, 3802: 3807,
        ]
        return PostgresDataType(rawValue: arrays[rawValue] ?? 0)
    }
}

/// One bound parameter, in PostgreSQL's text format or, for bytea, its binary format (the bytes
/// as they are: no hex text twice the size to build here and to parse on the server).
/// NULL when it holds neither.
public struct PostgresData: Sendable, Hashable {
    public var type: PostgresDataType
    /// The value as text; nil for NULL and for binary values.
    public var text: String?
    /// The value in binary format, when it is sent that way.
    public var binary: [UInt8]?

    public init(type: PostgresDataType, text: String?) {
        self.type = type
        self.text = text
    }

    /// A value sent in PostgreSQL's binary format for `type` (for bytea, the bytes themselves).
    public init(type: PostgresDataType, binary: [UInt8]) {
        self.type = type
        self.binary = binary
    }

    /// An untyped NULL.
    public static let null = PostgresData(type: .unspecified, text: nil)

    /// True for SQL NULL.
    public var isNull: Bool { text == nil && binary == nil }
}

/// A Swift value that can be bound as a query parameter.
public protocol PostgresEncodable: Sendable {
    var postgresData: PostgresData { get }
    /// The type announced when the value is NULL (an `Optional` that is nil). Default: unspecified.
    static var postgresDataType: PostgresDataType { get }
}

extension PostgresEncodable {
    public static var postgresDataType: PostgresDataType { .unspecified }
}

/// A Swift value that can be read from a column in PostgreSQL's text format.
public protocol PostgresDecodable {
    /// Parses the text PostgreSQL sends for the column (the session is UTC, DateStyle ISO, bytea hex).
    init(postgresText text: String) throws
    /// What SQL NULL decodes to; nil (the default) makes NULL a decoding error.
    static var postgresNull: Self? { get }
}

extension PostgresDecodable {
    public static var postgresNull: Self? { nil }
}

/// Why a value could not be parsed; the reason never quotes the value itself.
struct PostgresDecodingFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension PostgresData: PostgresEncodable {
    public var postgresData: PostgresData { self }
}

extension Optional: PostgresEncodable where Wrapped: PostgresEncodable {
    public var postgresData: PostgresData {
        self?.postgresData ?? PostgresData(type: Wrapped.postgresDataType, text: nil)
    }
    public static var postgresDataType: PostgresDataType { Wrapped.postgresDataType }
}

extension Optional: PostgresDecodable where Wrapped: PostgresDecodable {
    public init(postgresText text: String) throws { self = try Wrapped(postgresText: text) }
    public static var postgresNull: Self? { .some(.none) }
}

extension String: PostgresEncodable, PostgresDecodable {
    public var postgresData: PostgresData { PostgresData(type: .unspecified, text: self) }
    public init(postgresText text: String) { self = text }
}

/// Integers share their parsing; only the announced type differs.
private func parseInteger<T: FixedWidthInteger>(_ text: String, as: T.Type) throws -> T {
    guard let value = T(text) else { throw PostgresDecodingFailure("not an integer of \(T.bitWidth) bits") }
    return value
}

extension Int: PostgresEncodable, PostgresDecodable {
    public var postgresData: PostgresData { PostgresData(type: .int8, text: String(self)) }
    public static var postgresDataType: PostgresDataType { .int8 }
    public init(postgresText text: String) throws { self = try parseInteger(text, as: Int.self) }
}

extension Int64: PostgresEncodable, PostgresDecodable {
    public var postgresData: PostgresData { PostgresData(type: .int8, text: String(self)) }
    public static var postgresDataType: PostgresDataType { .int8 }
    public init(postgresText text: String) throws { self = try parseInteger(text, as: Int64.self) }
}

extension Int32: PostgresEncodable, PostgresDecodable {
    public var postgresData: PostgresData { PostgresData(type: .int4, text: String(self)) }
    public static var postgresDataType: PostgresDataType { .int4 }
    public init(postgresText text: String) throws { self = try parseInteger(text, as: Int32.self) }
}

extension Bool: PostgresEncodable, PostgresDecodable {
    public var postgresData: PostgresData { PostgresData(type: .bool, text: self ? "t" : "f") }
    public static var postgresDataType: PostgresDataType { .bool }
    public init(postgresText text: String) throws {
        switch text {
        case "t", "true": self = true
        case "f", "false": self = false
        default: throw PostgresDecodingFailure("not a boolean")
        }
    }
}

extension Double: PostgresEncodable, PostgresDecodable {
    public var postgresData: PostgresData {
        let text = isNaN ? "NaN" : isInfinite ? (self > 0 ? "Infinity" : "-Infinity") : String(self)
        return PostgresData(type: .float8, text: text)
    }
    public static var postgresDataType: PostgresDataType { .float8 }
    public init(postgresText text: String) throws {
        guard let value = Double(text) else { throw PostgresDecodingFailure("not a floating-point number") }
        self = value
    }
}

extension Decimal: PostgresEncodable, PostgresDecodable {
    public var postgresData: PostgresData { PostgresData(type: .numeric, text: isNaN ? "NaN" : description) }
    public static var postgresDataType: PostgresDataType { .numeric }
    /// numeric has up to 131072 digits, Decimal 38: longer values are rounded by Foundation.
    public init(postgresText text: String) throws {
        if text == "NaN" {
            self = .nan
            return
        }
        // Decimal(string:) accepts a valid prefix ("12abc"), so check the alphabet first.
        guard text.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2E || $0 == 0x2D || $0 == 0x2B }),
            let value = Decimal(string: text, locale: Locale(identifier: "en_US_POSIX"))
        else { throw PostgresDecodingFailure("not a finite numeric") }
        self = value
    }
}

extension UUID: PostgresEncodable, PostgresDecodable {
    public var postgresData: PostgresData { PostgresData(type: .uuid, text: uuidString) }
    public static var postgresDataType: PostgresDataType { .uuid }
    public init(postgresText text: String) throws {
        guard let value = UUID(uuidString: text) else { throw PostgresDecodingFailure("not a UUID") }
        self = value
    }
}

extension Date: PostgresEncodable, PostgresDecodable {
    public var postgresData: PostgresData { PostgresData(type: .timestamptz, text: PostgresTimestamp.format(self)) }
    public static var postgresDataType: PostgresDataType { .timestamptz }
    public init(postgresText text: String) throws {
        guard let value = PostgresTimestamp.parse(text) else {
            throw PostgresDecodingFailure("not a finite ISO timestamp")
        }
        self = value
    }
}

/// bytea read in hex format (`\x0a1b`), the only output format the session allows.
enum PostgresBytea {
    /// libpq decodes the hex: an event payload is ~24 KB of it, and a Swift nibble loop over a copy
    /// of the text was a tenth of a worker's CPU.
    static func parse(_ text: String) throws -> [UInt8] {
        let utf8 = text.utf8
        guard utf8.count >= 2, utf8.count % 2 == 0, utf8.starts(with: [0x5C, 0x78]) else {
            throw PostgresDecodingFailure("not hex-format bytea")
        }
        var length = 0
        guard let decoded = text.withCString({ PQunescapeBytea($0, &length) }) else {
            throw PostgresDecodingFailure("bytea too large to decode")
        }
        defer { PQfreemem(decoded) }
        // libpq skips what is not hex rather than failing: a short result means the text was not bytea.
        guard length == utf8.count / 2 - 1 else { throw PostgresDecodingFailure("not hex-format bytea") }
        return Array(UnsafeBufferPointer(start: decoded, count: length))
    }
}

extension Array: PostgresEncodable, PostgresDecodable where Element == UInt8 {
    public var postgresData: PostgresData { PostgresData(type: .bytea, binary: self) }
    public static var postgresDataType: PostgresDataType { .bytea }
    public init(postgresText text: String) throws { self = try PostgresBytea.parse(text) }
}

extension Data: PostgresEncodable, PostgresDecodable {
    public var postgresData: PostgresData { PostgresData(type: .bytea, binary: Array(self)) }
    public static var postgresDataType: PostgresDataType { .bytea }
    public init(postgresText text: String) throws { self = Data(try PostgresBytea.parse(text)) }
}

/// A jsonb value as its JSON text; encode or decode a Codable value through it.
public struct PostgresJSON: Sendable, Hashable, PostgresEncodable, PostgresDecodable {
    public let text: String

    public init(text: String) { self.text = text }

    public init<T: Encodable>(encoding value: T, encoder: JSONEncoder = JSONEncoder()) throws {
        text = String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    public init(postgresText text: String) { self.text = text }

    public func decode<T: Decodable>(_ type: T.Type = T.self, decoder: JSONDecoder = JSONDecoder()) throws -> T {
        try decoder.decode(type, from: Data(text.utf8))
    }

    public var postgresData: PostgresData { PostgresData(type: .jsonb, text: text) }
    public static var postgresDataType: PostgresDataType { .jsonb }
}

/// A one-dimensional array parameter (`WHERE id = ANY($1)`, `unnest($1, $2)` for batch inserts).
public struct PostgresArray<Element: PostgresEncodable>: PostgresEncodable {
    public var elements: [Element]
    public init(_ elements: [Element]) { self.elements = elements }

    /// bytea and text elements go in binary format (a batch of payloads is not turned into hex
    /// text; strings are copied as they are, with no quoting to scan for or parse), the others as
    /// a text literal.
    public var postgresData: PostgresData {
        switch Element.postgresDataType {
        case .bytea: PostgresData(type: Self.postgresDataType, binary: binaryArray(elementType: .bytea) { $0.binary })
        // An unspecified element is text (the array is announced as text[]); its binary format is its UTF-8.
        case .unspecified, .text:
            PostgresData(type: Self.postgresDataType, binary: binaryArray(elementType: .text) { $0.text.map { Array($0.utf8) } })
        default: PostgresData(type: Self.postgresDataType, text: literal)
        }
    }
    public static var postgresDataType: PostgresDataType { Element.postgresDataType.arrayType }

    /// PostgreSQL's binary array format (array_recv): dimensions, null flag, element type, then
    /// each element's length (-1 for NULL) and bytes; all integers big-endian.
    private func binaryArray(elementType: PostgresDataType, _ bytes: (PostgresData) -> [UInt8]?) -> [UInt8] {
        let values = elements.map { bytes($0.postgresData) }
        var out: [UInt8] = []
        out.reserveCapacity(20 + values.reduce(0) { $0 + 4 + ($1?.count ?? 0) })
        func int32(_ value: Int32) { withUnsafeBytes(of: value.bigEndian) { out += $0 } }
        int32(values.isEmpty ? 0 : 1)
        int32(values.contains(nil) ? 1 : 0)
        int32(Int32(bitPattern: elementType.rawValue))
        if !values.isEmpty {
            int32(Int32(values.count))
            int32(1)
        }
        for value in values {
            guard let value else {
                int32(-1)
                continue
            }
            int32(Int32(value.count))
            out += value
        }
        return out
    }

    /// Array literal with every element quoted, so no element text can change the structure.
    private var literal: String {
        var out = "{"
        for (index, element) in elements.enumerated() {
            if index > 0 { out += "," }
            guard let text = element.postgresData.text else {
                out += "NULL"
                continue
            }
            out += "\""
            if !text.utf8.contains(where: { $0 == 0x22 || $0 == 0x5C }) {
                out += text  // nothing to escape: copied whole (batches bind thousands of elements)
            } else {
                for character in text.unicodeScalars {
                    if character == "\"" || character == "\\" { out += "\\" }
                    out.unicodeScalars.append(character)
                }
            }
            out += "\""
        }
        return out + "}"
    }
}

/// timestamptz text in the session's ISO style and UTC zone, with microseconds.
enum PostgresTimestamp {
    /// Seconds from 1970 beyond which a date is outside PostgreSQL's timestamptz range (4713 BC to
    /// 294276 AD) and its microseconds near the end of Int64's.
    static let representableSeconds = 9.2e12

    static func format(_ date: Date) -> String {
        // A date from a payload may be anything (1e400 ms parses as infinity): one PostgreSQL cannot
        // hold is written as a year it refuses, so the statement fails with a data exception
        // (SQLSTATE 22008) instead of this process trapping in Int64(_:).
        let epochSeconds = date.timeIntervalSince1970
        guard epochSeconds.isFinite, abs(epochSeconds) < representableSeconds else {
            return epochSeconds > 0 ? "294277-01-01 00:00:00+00" : "4714-01-01 00:00:00+00 BC"
        }
        let micros = Int64((epochSeconds * 1_000_000).rounded())
        let (days, microOfDay) = floorDivision(micros, 86_400_000_000)
        let (year, month, day) = CivilCalendar.date(fromDays: days)
        let seconds = microOfDay / 1_000_000
        // Digit by digit: String(format:) cost more than the rest of binding a row.
        var out: [UInt8] = []
        out.reserveCapacity(32)
        func digits(_ value: Int64, _ count: Int) {
            var divisor: Int64 = 1
            for _ in 1..<count { divisor *= 10 }
            while divisor * 10 <= value { divisor *= 10 }
            while divisor > 0 {
                out.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
                divisor /= 10
            }
        }
        digits(year > 0 ? year : 1 - year, 4)
        out.append(UInt8(ascii: "-"))
        digits(month, 2)
        out.append(UInt8(ascii: "-"))
        digits(day, 2)
        out.append(UInt8(ascii: " "))
        digits(seconds / 3600, 2)
        out.append(UInt8(ascii: ":"))
        digits(seconds / 60 % 60, 2)
        out.append(UInt8(ascii: ":"))
        digits(seconds % 60, 2)
        out.append(UInt8(ascii: "."))
        digits(microOfDay % 1_000_000, 6)
        out += "+00".utf8
        if year <= 0 { out += " BC".utf8 }
        return String(decoding: out, as: UTF8.self)
    }

    /// `YYYY-MM-DD[ HH:MM:SS[.ffffff]][+HH[:MM[:SS]]][ BC]`; nil for anything else (incl. infinity).
    static func parse(_ text: String) -> Date? {
        var utf8 = Array(text.utf8)
        var bc = false
        if utf8.count > 3, utf8.suffix(3).elementsEqual(" BC".utf8) {
            bc = true
            utf8.removeLast(3)
        }
        var index = 0
        func number(_ minimum: Int, _ maximum: Int) -> Int64? {
            var value: Int64 = 0
            var count = 0
            while index < utf8.count, count < maximum, (0x30...0x39).contains(utf8[index]) {
                value = value * 10 + Int64(utf8[index] - 0x30)
                index += 1
                count += 1
            }
            return count >= minimum ? value : nil
        }
        func skip(_ character: UInt8) -> Bool {
            guard index < utf8.count, utf8[index] == character else { return false }
            index += 1
            return true
        }
        guard let year = number(4, 9), skip(0x2D), let month = number(2, 2), skip(0x2D), let day = number(2, 2),
            (1...12).contains(month), (1...31).contains(day)
        else { return nil }
        var secondOfDay: Int64 = 0
        var fraction: Int64 = 0
        if index < utf8.count, utf8[index] == 0x20 || utf8[index] == 0x54 {
            index += 1
            guard let hour = number(2, 2), skip(0x3A), let minute = number(2, 2), skip(0x3A),
                let second = number(2, 2), hour <= 24, minute < 60, second <= 60
            else { return nil }
            secondOfDay = hour * 3600 + minute * 60 + second
            if skip(0x2E) {
                let start = index
                guard let digits = number(1, 6) else { return nil }
                fraction = digits
                for _ in 0..<(6 - (index - start)) { fraction *= 10 }
            }
        }
        var offset: Int64 = 0
        if index < utf8.count, utf8[index] == 0x2B || utf8[index] == 0x2D {
            let sign: Int64 = utf8[index] == 0x2D ? -1 : 1
            index += 1
            guard let hours = number(2, 2) else { return nil }
            offset = hours * 3600
            if skip(0x3A) {
                guard let minutes = number(2, 2) else { return nil }
                offset += minutes * 60
                if skip(0x3A) {
                    guard let seconds = number(2, 2) else { return nil }
                    offset += seconds
                }
            }
            offset *= sign
        }
        guard index == utf8.count else { return nil }
        let days = CivilCalendar.days(fromYear: bc ? 1 - year : year, month, day)
        let micros = (days * 86_400 + secondOfDay - offset) * 1_000_000 + fraction
        return Date(timeIntervalSince1970: Double(micros) / 1_000_000)
    }

    private static func floorDivision(_ a: Int64, _ b: Int64) -> (Int64, Int64) {
        let q = a / b
        let r = a % b
        return r < 0 ? (q - 1, r + b) : (q, r)
    }
}
