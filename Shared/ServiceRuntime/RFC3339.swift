import Foundation

/// RFC 3339 UTC timestamps, the only time format the project writes (`2026-01-31T23:59:59Z`).
public enum RFC3339 {
    public static func string(from date: Date, fractional: Bool = false) -> String {
        let ms = (date.timeIntervalSince1970 * 1000).rounded(.down)
        var seconds = time_t(floor(ms / 1000))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let base = String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
            Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec))
        guard fractional else { return base + "Z" }
        let millis = Int(ms - Double(seconds) * 1000)
        return base + String(format: ".%03dZ", millis)
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
