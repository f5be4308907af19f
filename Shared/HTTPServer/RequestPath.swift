/// The one spelling of a request path that the admission check and the routes see, made once by
/// the server before either runs: `//metrics`, `/metrics/`, `/./metrics`, `/x/../metrics` and
/// `/%6Detrics` are all `/metrics`, so no route or refusal can be reached or dodged by spelling.
public enum RequestPath {
    /// Empty and `.` segments dropped, `..` resolved (never above the root), escapes of unreserved
    /// characters (RFC 3986 §2.3) decoded and every other escape kept with upper-case digits (so an
    /// encoded `/` stays inside its segment); no trailing slash except for the root.
    public static func normalized(_ path: String) -> String {
        var segments: [Substring] = []
        for raw in path.split(separator: "/", omittingEmptySubsequences: true) {
            let segment = raw.utf8.contains(UInt8(ascii: "%")) ? Substring(decodingUnreserved(raw)) : raw
            switch segment {
            case ".": continue
            case "..": _ = segments.popLast()
            default: segments.append(segment)
            }
        }
        return "/" + segments.joined(separator: "/")
    }

    private static func decodingUnreserved(_ segment: Substring) -> String {
        let bytes = Array(segment.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "%"), index + 2 < bytes.count,
                let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2])
            {
                let byte = high << 4 | low
                if isUnreserved(byte) {
                    out.append(byte)
                } else {
                    out += [UInt8(ascii: "%"), upperHex(high), upperHex(low)]
                }
                index += 3
            } else {
                out.append(bytes[index])
                index += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    private static func upperHex(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "A") + nibble - 10
    }

    private static func isUnreserved(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
            UInt8(ascii: "~"):
            true
        default: false
        }
    }
}
