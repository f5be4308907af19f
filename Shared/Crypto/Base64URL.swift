/// Base64url (RFC 4648 §5) without padding, as JOSE uses it (RFC 7515 §2).
///
/// Decoding is strict: padding, characters outside the alphabet, an impossible length or
/// non-zero leftover bits are all refused, so every byte string has exactly one accepted text.
public enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// 0...63 for alphabet characters, 0xFF for anything else.
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 0xFF, count: 256)
        for (index, char) in alphabet.enumerated() { table[Int(char)] = UInt8(index) }
        return table
    }()

    /// For each of the four positions in a quad, a character's six bits already shifted into
    /// place in a 24-bit group, or `invalidBit` (outside the 24 bits) for any other character:
    /// a quad decodes with four loads and three ORs, and one test finds any bad character.
    private static let invalidBit: UInt32 = 1 << 24
    private static let quadTables: [UInt32] = {
        var table = [UInt32](repeating: invalidBit, count: 4 * 256)
        for (index, char) in alphabet.enumerated() {
            for position in 0..<4 { table[position * 256 + Int(char)] = UInt32(index) << (18 - 6 * position) }
        }
        return table
    }()

    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        let input = Array(bytes)
        var out = [UInt8]()
        out.reserveCapacity((input.count * 4 + 2) / 3)
        var index = 0
        while index + 3 <= input.count {
            let n = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
            out.append(alphabet[Int(n >> 6 & 63)])
            out.append(alphabet[Int(n & 63)])
            index += 3
        }
        switch input.count - index {
        case 1:
            let n = UInt32(input[index]) << 16
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
        case 2:
            let n = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
            out.append(alphabet[Int(n >> 18 & 63)])
            out.append(alphabet[Int(n >> 12 & 63)])
            out.append(alphabet[Int(n >> 6 & 63)])
        default: break
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// The decoded bytes, or nil when `text` is not canonical unpadded base64url.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? { decode(bytes: text.utf8) }

    /// The decoded bytes of base64url text given as UTF-8 code units, or nil when not canonical.
    public static func decode(bytes input: some Collection<UInt8>) -> [UInt8]? {
        if let result = input.withContiguousStorageIfAvailable({ decodeContiguous($0) }) { return result }
        return Array(input).withUnsafeBufferPointer { decodeContiguous($0) }
    }

    private static func decodeContiguous(_ input: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        let remainder = input.count % 4
        if remainder == 1 { return nil }
        let whole = input.count - remainder
        let outputCount = whole / 4 * 3 + (remainder == 0 ? 0 : remainder - 1)
        var valid = true
        // Written in place (no per-byte append): this runs over every payload the service receives.
        // One spare byte: each quad is stored as four bytes, the fourth overwritten by the next quad.
        let out = [UInt8](unsafeUninitializedCapacity: outputCount + 1) { out, initialized in
            quadTables.withUnsafeBufferPointer { tables in
                let t0 = tables.baseAddress!
                let t1 = t0 + 256
                let t2 = t0 + 512
                let t3 = t0 + 768
                let source = input.baseAddress!
                let target = UnsafeMutableRawPointer(out.baseAddress!)
                var read = 0
                var write = 0
                var bad: UInt32 = 0
                // Two quads per step, stored as one 8-byte write (6 bytes used, 2 overwritten
                // next); needs 2 spare bytes, so it stops while a quad is still left.
                // The eight characters come in one 64-bit load (little-endian: the first character
                // is the low byte), so the load ports serve the table lookups, not byte loads.
                while read + 12 <= whole {
                    let w = UInt64(littleEndian: UnsafeRawPointer(source + read).loadUnaligned(as: UInt64.self))
                    let n1 = t0[Int(w & 0xFF)] | t1[Int(w >> 8 & 0xFF)] | t2[Int(w >> 16 & 0xFF)] | t3[Int(w >> 24 & 0xFF)]
                    let n2 = t0[Int(w >> 32 & 0xFF)] | t1[Int(w >> 40 & 0xFF)] | t2[Int(w >> 48 & 0xFF)] | t3[Int(w >> 56)]
                    bad |= n1 | n2
                    target.storeBytes(of: (UInt64(n1) << 40 | UInt64(n2) << 16).bigEndian, toByteOffset: write, as: UInt64.self)
                    read += 8
                    write += 6
                }
                while read < whole {
                    let n = t0[Int(source[read])] | t1[Int(source[read + 1])] | t2[Int(source[read + 2])] | t3[Int(source[read + 3])]
                    bad |= n
                    target.storeBytes(of: (n << 8).bigEndian, toByteOffset: write, as: UInt32.self)
                    read += 4
                    write += 3
                }
                // Checked once at the end: a bad character only costs the wasted decoding.
                guard bad & invalidBit == 0 else {
                    valid = false
                    return
                }
                values.withUnsafeBufferPointer { table in
                    switch remainder {
                    case 2:
                        let a = table[Int(input[read])]
                        let b = table[Int(input[read + 1])]
                        valid = (a | b) & 0xC0 == 0 && b & 0x0F == 0
                        out[write] = a << 2 | b >> 4
                    case 3:
                        let a = table[Int(input[read])]
                        let b = table[Int(input[read + 1])]
                        let c = table[Int(input[read + 2])]
                        valid = (a | b | c) & 0xC0 == 0 && c & 0x03 == 0
                        out[write] = a << 2 | b >> 4
                        out[write + 1] = b << 4 | c >> 2
                    default: break
                    }
                }
            }
            // Every byte is written on the valid path; on the invalid one the array is discarded.
            initialized = valid ? outputCount : 0
        }
        return valid ? out : nil
    }
}
