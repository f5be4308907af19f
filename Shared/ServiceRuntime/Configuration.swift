import Foundation

/// One problem found in the environment: which variable, what it held, what was expected.
public struct ConfigurationProblem: Sendable, Equatable, CustomStringConvertible {
    public let name: String
    public let value: String?
    public let expected: String

    public var description: String {
        guard let value else { return "\(name): missing; expected \(expected)" }
        let shown = Redaction.redact(key: name, value: .string(value)).description
        return "\(name): invalid value '\(shown)'; expected \(expected)"
    }
}

/// Every problem of a configuration at once, so an operator fixes them in one round.
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    public let problems: [ConfigurationProblem]
    public var description: String {
        "invalid configuration:\n" + problems.map { "  - \($0)" }.joined(separator: "\n")
    }
}

/// Reads typed settings from environment variables, collecting problems instead of stopping at
/// the first one. Call `validate()` once everything has been read.
public final class ConfigurationReader {
    public let environment: [String: String]
    public private(set) var problems: [ConfigurationProblem] = []

    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.environment = environment
    }

    /// The raw value, or nil when unset or empty.
    public func raw(_ name: String) -> String? {
        guard let value = environment[name], !value.isEmpty else { return nil }
        return value
    }

    public func string(_ name: String, default fallback: String) -> String { raw(name) ?? fallback }

    public func requiredString(_ name: String, expected: String) -> String {
        guard let value = raw(name) else {
            report(name, nil, expected)
            return ""
        }
        return value
    }

    public func optionalString(_ name: String) -> String? { raw(name) }

    public func int(_ name: String, default fallback: Int, range: ClosedRange<Int> = 0...Int.max) -> Int {
        guard let value = raw(name) else { return fallback }
        guard let parsed = Int(value.trimmingCharacters(in: .whitespaces)), range.contains(parsed) else {
            report(name, value, "an integer in \(range.lowerBound)...\(range.upperBound)")
            return fallback
        }
        return parsed
    }

    public func bool(_ name: String, default fallback: Bool) -> Bool {
        guard let value = raw(name) else { return fallback }
        switch value.lowercased() {
        case "true", "1", "yes", "on": return true
        case "false", "0", "no", "off": return false
        default:
            report(name, value, "true or false")
            return fallback
        }
    }

    /// A value that must be one of `allowed` (compared case-insensitively; the canonical spelling is returned).
    public func oneOf(_ name: String, _ allowed: [String], default fallback: String) -> String {
        guard let value = raw(name) else { return fallback }
        guard let match = allowed.first(where: { $0.lowercased() == value.lowercased() }) else {
            report(name, value, "one of " + allowed.joined(separator: ", "))
            return fallback
        }
        return match
    }

    /// Comma-separated `host:port` pairs.
    public func hostPorts(_ name: String, default fallback: String? = nil) -> String {
        guard let value = raw(name) ?? fallback else {
            report(name, nil, "host:port[,host:port...]")
            return ""
        }
        let valid = value.split(separator: ",").allSatisfy { pair in
            let parts = pair.trimmingCharacters(in: .whitespaces).split(separator: ":")
            return parts.count >= 2 && !parts[0].isEmpty && UInt16(parts.last!) != nil
        }
        if !valid { report(name, value, "host:port[,host:port...]") }
        return value
    }

    /// Comma-separated `name:value` pairs (keys listed in order; values may contain colons).
    public func pairs(_ name: String, expected: String) -> [(String, String)]? {
        guard let value = raw(name) else { return nil }
        var result: [(String, String)] = []
        for item in value.split(separator: ",") {
            guard let colon = item.firstIndex(of: ":"), colon != item.startIndex, item.index(after: colon) != item.endIndex
            else {
                report(name, value, expected)
                return nil
            }
            result.append(
                (
                    String(item[..<colon]).trimmingCharacters(in: .whitespaces),
                    String(item[item.index(after: colon)...]).trimmingCharacters(in: .whitespaces)
                ))
        }
        return result
    }

    public func report(_ name: String, _ value: String?, _ expected: String) {
        problems.append(ConfigurationProblem(name: name, value: value, expected: expected))
    }

    public func validate() throws(ConfigurationError) {
        if !problems.isEmpty { throw ConfigurationError(problems: problems) }
    }
}
