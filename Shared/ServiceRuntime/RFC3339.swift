import Foundation

/// RFC 3339 UTC timestamps, the only time format the project writes (`2026-01-31T23:59:59Z`).
public enum RFC3339 {
    /// Written digit by digit: every log line carries one, and `String(format:)` cost more than
    /// the rest of the line.
    public static func string(from date: Date, fractional: Bool = false) -> String {
        // Dates that reach this come from Apple's payloads, requests and the database: one beyond
        // ±9.2·10¹² s (PostgreSQL's range; 1e400 ms parses as infinity) is written at that bound
        // instead of trapping in time_t(_:).
        let limit = 9.2e15
        let raw = (date.timeIntervalSince1970 * 1000).rounded(.down)
        let ms = raw.isNaN ? 0 : Swift.min(Swift.max(raw, -limit), limit)
        var seconds = time_t(floor(ms / 1000))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        var out: [UInt8] = []
        out.reserveCapacity(24)
        func digits(_ value: Int, _ count: Int) {
            var divisor = 1
            for _ in 1..<count { divisor *= 10 }
            // Years past 9999 keep all their digits, like %04d.
            while divisor * 10 <= value { divisor *= 10 }
            var rest = value
            while divisor > 0 {
                out.append(UInt8(ascii: "0") + UInt8(rest / divisor % 10))
                rest %= divisor
                divisor /= 10
            }
        }
        let year = Int(parts.tm_year) + 1900
        if year < 0 { out.append(UInt8(ascii: "-")) }
        digits(abs(year), 4)
        out.append(UInt8(ascii: "-"))
        digits(Int(parts.tm_mon) + 1, 2)
        out.append(UInt8(ascii: "-"))
        digits(Int(parts.tm_mday), 2)
        out.append(UInt8(ascii: "T"))
        digits(Int(parts.tm_hour), 2)
        out.append(UInt8(ascii: ":"))
        digits(Int(parts.tm_min), 2)
        out.append(UInt8(ascii: ":"))
        digits(Int(parts.tm_sec), 2)
        if fractional {
            out.append(UInt8(ascii: "."))
            digits(Int(ms - Double(seconds) * 1000), 3)
        }
        out.append(UInt8(ascii: "Z"))
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS[.fff](Z|±HH:MM)`.
    public static func date(from string: String) -> Date? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let d = formatter.date(from: string) { return d }
        formatter.formatOptions = [.withInternetDateTime]
        return formatter.date(from: string)
    }
}
