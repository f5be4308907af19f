import Foundation
import Synchronization

/// Severity of a log line, ordered from the most verbose to the most severe.
public enum LogLevel: String, Sendable, Comparable, CaseIterable {
    case trace, debug, info, notice, warning, error, critical

    private var rank: Int { Self.allCases.firstIndex(of: self)! }
    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rank < rhs.rank }
}

/// One metadata value of a structured log line.
public enum LogValue: Sendable, Equatable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByFloatLiteral, CustomStringConvertible
{
    case string(String)
    case int(Int64)
    case double(Double)
    case bool(Bool)

    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(_ value: some BinaryInteger) { self = .int(Int64(value)) }
    public init(_ value: some CustomStringConvertible) { self = .string(value.description) }

    public var description: String {
        switch self {
        case .string(let s): s
        case .int(let i): String(i)
        case .double(let d): String(d)
        case .bool(let b): String(b)
        }
    }
}

/// Structured logger: a value carrying a label, a minimum level and metadata, writing JSON lines.
///
/// Copies keep their metadata, so a request's logger can be enriched and handed down.
/// Messages are constant text; data goes into metadata under dot-notation keys.
public struct Logger: Sendable {
    public typealias Metadata = [String: LogValue]

    public let label: String
    public var level: LogLevel
    public var metadata: Metadata
    private let sink: LogSink

    public init(label: String, level: LogLevel? = nil, metadata: Metadata = [:], sink: LogSink = .standardOutput) {
        self.label = label
        self.level = level ?? LogSink.defaultLevel
        self.metadata = metadata
        self.sink = sink
    }

    public subscript(metadataKey key: String) -> LogValue? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// A copy of this logger with extra metadata.
    public func with(_ extra: Metadata) -> Logger {
        var copy = self
        copy.metadata.merge(extra) { _, new in new }
        return copy
    }

    public func log(_ level: LogLevel, _ message: @autoclosure () -> String, _ extra: Metadata = [:]) {
        guard level >= self.level else { return }
        sink.write(level: level, label: label, message: message(), metadata: metadata.merging(extra) { _, new in new })
    }

    public func trace(_ message: @autoclosure () -> String, _ extra: Metadata = [:]) { log(.trace, message(), extra) }
    public func debug(_ message: @autoclosure () -> String, _ extra: Metadata = [:]) { log(.debug, message(), extra) }
    public func info(_ message: @autoclosure () -> String, _ extra: Metadata = [:]) { log(.info, message(), extra) }
    public func notice(_ message: @autoclosure () -> String, _ extra: Metadata = [:]) { log(.notice, message(), extra) }
    public func warning(_ message: @autoclosure () -> String, _ extra: Metadata = [:]) { log(.warning, message(), extra) }
    public func error(_ message: @autoclosure () -> String, _ extra: Metadata = [:]) { log(.error, message(), extra) }
    public func critical(_ message: @autoclosure () -> String, _ extra: Metadata = [:]) {
        log(.critical, message(), extra)
    }
}

/// Where log lines go: one JSON object per line, written whole under a lock.
public final class LogSink: Sendable {
    /// Standard output, the destination of every service in production.
    public static let standardOutput = LogSink(fileDescriptor: STDOUT_FILENO)
    /// Level used when a logger is created without one: `LOG_LEVEL`, else `info`.
    public static let defaultLevel: LogLevel =
        ProcessInfo.processInfo.environment["LOG_LEVEL"].flatMap { LogLevel(rawValue: $0.lowercased()) } ?? .info

    private enum Target {
        case descriptor(Int32)
        case memory([String])
    }
    private let target: Mutex<Target>

    public init(fileDescriptor: Int32) { target = Mutex(.descriptor(fileDescriptor)) }
    /// A sink that keeps lines in memory, for tests that inspect what was logged.
    public static func memory() -> LogSink { LogSink(memory: ()) }
    private init(memory: Void) { target = Mutex(.memory([])) }

    /// Lines captured by a memory sink.
    public var lines: [String] {
        target.withLock { if case .memory(let lines) = $0 { lines } else { [] } }
    }

    func write(level: LogLevel, label: String, message: String, metadata: Logger.Metadata) {
        let line = Self.render(level: level, label: label, message: message, metadata: metadata, date: Date())
        target.withLock { target in
            switch target {
            case .descriptor(let fd):
                var bytes = Array(line.utf8)
                bytes.append(0x0A)
                bytes.withUnsafeBytes { buffer in
                    var offset = 0
                    while offset < buffer.count {
                        let n = Foundation.write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                        if n <= 0 { if errno == EINTR { continue } else { break } }
                        offset += n
                    }
                }
            case .memory(var lines):
                lines.append(line)
                target = .memory(lines)
            }
        }
    }

    static func render(level: LogLevel, label: String, message: String, metadata: Logger.Metadata, date: Date)
        -> String
    {
        var out = "{\"time\":\"\(RFC3339.string(from: date, fractional: true))\",\"level\":\"\(level.rawValue)\""
        out += ",\"logger\":" + JSONText.quote(label)
        out += ",\"message\":" + JSONText.quote(Redaction.scrub(message))
        for key in metadata.keys.sorted() where !["time", "level", "logger", "message"].contains(key) {
            out += "," + JSONText.quote(key) + ":"
            switch Redaction.redact(key: key, value: metadata[key]!) {
            case .string(let s): out += JSONText.quote(s)
            case .int(let i): out += String(i)
            case .double(let d): out += d.isFinite ? String(d) : "null"
            case .bool(let b): out += b ? "true" : "false"
            }
        }
        return out + "}"
    }
}

/// Minimal JSON string quoting for the log writer (Foundation's encoder is far slower per line).
enum JSONText {
    static func quote(_ s: String) -> String {
        // Most values need no escaping: copy them whole instead of scalar by scalar.
        if !s.utf8.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }) { return "\"" + s + "\"" }
        var out = "\""
        out.reserveCapacity(s.utf8.count + 2)
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                out +=
                    "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count)
                    + String(scalar.value, radix: 16)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
