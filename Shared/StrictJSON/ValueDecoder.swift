import Foundation

extension StrictJSON.Value {
    /// Decodes this value as `T`: the scalar types directly, `Date` from epoch milliseconds,
    /// everything else through its own `init(from:)`. `codingPath` locates it in errors.
    public func decode<T: Decodable>(_ type: T.Type, codingPath: [any CodingKey] = []) throws -> T {
        try decodeValue(T.self, self, codingPath)
    }

    /// The error for this value where a `type` was expected, at `codingPath`.
    public func typeMismatch(expected type: Any.Type, codingPath: [any CodingKey]) -> DecodingError {
        mismatch(type, self, codingPath)
    }
}

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
