/// One ASN.1 element read from BER: DER plus indefinite lengths and constructed strings, as
/// StoreKit 1 receipts use them. Only the framing is decoded; values are read on request.
public struct BERElement: Sendable, Hashable {
    /// Universal (0), application (1), context-specific (2) or private (3).
    public let tagClass: UInt8
    public let isConstructed: Bool
    public let tagNumber: UInt32
    /// The contents octets (for an indefinite length: everything before the end-of-contents).
    public let contents: ArraySlice<UInt8>

    /// Nesting bound: a receipt nests five deep; deeper input is refused, not recursed into.
    public static let maximumDepth = 32

    public static let integerTag: UInt32 = 2
    public static let octetStringTag: UInt32 = 4
    public static let utf8StringTag: UInt32 = 12
    public static let sequenceTag: UInt32 = 16
    public static let setTag: UInt32 = 17
    public static let printableStringTag: UInt32 = 19
    public static let ia5StringTag: UInt32 = 22

    /// Exactly one element spanning all of `bytes`; trailing bytes are refused.
    public init(parsing bytes: ArraySlice<UInt8>) throws(CryptoError) {
        var reader = Reader(bytes: bytes)
        self = try reader.element(depth: 0)
        guard reader.offset == bytes.endIndex else {
            throw CryptoError(.invalidInput, "\(bytes.endIndex - reader.offset) bytes after the ASN.1 element")
        }
    }

    /// The elements the contents of a constructed element consist of, in order.
    public func children() throws(CryptoError) -> [BERElement] {
        guard isConstructed else { throw CryptoError(.invalidInput, "a primitive ASN.1 element has no children") }
        var reader = Reader(bytes: contents)
        var elements: [BERElement] = []
        while reader.offset < contents.endIndex { elements.append(try reader.element(depth: 1)) }
        return elements
    }

    /// Whether this is the universal element with this tag number.
    public func isUniversal(_ tagNumber: UInt32) -> Bool { tagClass == 0 && self.tagNumber == tagNumber }

    /// The value of an INTEGER that fits an Int64.
    public func integer() throws(CryptoError) -> Int64 {
        guard isUniversal(Self.integerTag), !isConstructed, !contents.isEmpty, contents.count <= 8 else {
            throw CryptoError(.invalidInput, "not an INTEGER of at most 8 bytes")
        }
        // Two's complement, big-endian: start from the sign, shift the bytes in.
        var value: Int64 = contents.first! & 0x80 == 0 ? 0 : -1
        for byte in contents { value = value << 8 | Int64(byte) }
        return value
    }

    /// The octets of an OCTET STRING, its segments joined when it is constructed (BER).
    public func octets() throws(CryptoError) -> [UInt8] {
        guard isUniversal(Self.octetStringTag) else { throw CryptoError(.invalidInput, "not an OCTET STRING") }
        return try stringOctets(depth: 0)
    }

    /// The text of a UTF8String, IA5String or PrintableString.
    public func string() throws(CryptoError) -> String {
        guard tagClass == 0, [Self.utf8StringTag, Self.ia5StringTag, Self.printableStringTag].contains(tagNumber) else {
            throw CryptoError(.invalidInput, "not a UTF8String, IA5String or PrintableString")
        }
        guard let text = String(validating: try stringOctets(depth: 0), as: UTF8.self) else {
            throw CryptoError(.invalidInput, "string is not valid UTF-8")
        }
        return text
    }

    private func stringOctets(depth: Int) throws(CryptoError) -> [UInt8] {
        guard isConstructed else { return Array(contents) }
        guard depth < Self.maximumDepth else { throw CryptoError(.invalidInput, "ASN.1 string segments nest too deep") }
        var octets: [UInt8] = []
        for segment in try children() {
            guard segment.tagClass == tagClass, segment.tagNumber == tagNumber else {
                throw CryptoError(.invalidInput, "a constructed string segment has another tag")
            }
            octets += try segment.stringOctets(depth: depth + 1)
        }
        return octets
    }

    private struct Reader {
        let bytes: ArraySlice<UInt8>
        var offset: Int

        init(bytes: ArraySlice<UInt8>) {
            self.bytes = bytes
            offset = bytes.startIndex
        }

        mutating func byte() throws(CryptoError) -> UInt8 {
            guard offset < bytes.endIndex else { throw CryptoError(.invalidInput, "ASN.1 element truncated") }
            defer { offset += 1 }
            return bytes[offset]
        }

        mutating func element(depth: Int) throws(CryptoError) -> BERElement {
            guard depth <= BERElement.maximumDepth else { throw CryptoError(.invalidInput, "ASN.1 elements nest too deep") }
            let first = try byte()
            let constructed = first & 0x20 != 0
            var tagNumber = UInt32(first & 0x1f)
            if tagNumber == 0x1f {
                tagNumber = 0
                while true {
                    let next = try byte()
                    guard tagNumber < 1 << 24 else { throw CryptoError(.invalidInput, "ASN.1 tag number too large") }
                    tagNumber = tagNumber << 7 | UInt32(next & 0x7f)
                    if next & 0x80 == 0 { break }
                }
            }
            let lengthByte = try byte()
            let contents: ArraySlice<UInt8>
            if lengthByte == 0x80 {
                guard constructed else { throw CryptoError(.invalidInput, "a primitive ASN.1 element with an indefinite length") }
                let start = offset
                // The contents run until the end-of-contents octets that close this element,
                // so the elements inside are read (and nested indefinite ones skipped) to find it.
                while true {
                    guard offset + 1 < bytes.endIndex else { throw CryptoError(.invalidInput, "ASN.1 end-of-contents missing") }
                    if bytes[offset] == 0 && bytes[offset + 1] == 0 { break }
                    _ = try element(depth: depth + 1)
                }
                contents = bytes[start..<offset]
                offset += 2
            } else {
                var length = Int(lengthByte)
                if lengthByte & 0x80 != 0 {
                    let count = Int(lengthByte & 0x7f)
                    guard count <= 4 else { throw CryptoError(.invalidInput, "ASN.1 length of \(count) bytes") }
                    length = 0
                    for _ in 0..<count { length = length << 8 | Int(try byte()) }
                }
                guard length <= bytes.endIndex - offset else { throw CryptoError(.invalidInput, "ASN.1 element truncated") }
                contents = bytes[offset..<offset + length]
                offset += length
            }
            return BERElement(
                tagClass: first >> 6, isConstructed: constructed, tagNumber: tagNumber, contents: contents)
        }
    }

    private init(tagClass: UInt8, isConstructed: Bool, tagNumber: UInt32, contents: ArraySlice<UInt8>) {
        self.tagClass = tagClass
        self.isConstructed = isConstructed
        self.tagNumber = tagNumber
        self.contents = contents
    }
}
