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
///
/// Every setting `X` may come from a file instead: `X_FILE` names it (a mounted Kubernetes or
/// Docker secret), and its content, without the trailing line break, is the value. Setting both
/// is a problem: nobody should have to guess which one wins.
public final class ConfigurationReader {
    public let environment: [String: String]
    public private(set) var problems: [ConfigurationProblem] = []

    /// The settings that hold secrets: each is best given as a file (`X_FILE`), and
    /// deploy/UPGRADING.md lists them (check-deployment.py compares).
    public static let secretSettings = [
        "DATABASE_URL", "DATABASE_READ_URL", "PAYLOAD_ENCRYPTION_KEYS", "CURSOR_SIGNING_KEY", "SERVICE_TOKENS", "ADMIN_TOKENS",
        "USER_TOKEN_HS256_SECRETS", "USER_TOKEN_HS256_SECRET",
    ]

    public init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.environment = environment
    }

    /// The raw value, or nil when unset or empty; read from the file `<name>_FILE` names when that is set.
    public func raw(_ name: String) -> String? {
        let direct = environment[name].flatMap { $0.isEmpty ? nil : $0 }
        guard let path = environment[name + "_FILE"], !path.isEmpty else { return direct }
        guard direct == nil else {
            report(name + "_FILE", path, "\(name) or \(name)_FILE, not both")
            return direct
        }
        guard let content = Self.read(path) else {
            report(name + "_FILE", path, "the path of a readable file holding \(name)")
            return nil
        }
        return content.isEmpty ? nil : content
    }

    /// `environment` with `X` filled from `X_FILE` for the names `include` accepts (and `X_FILE`
    /// removed), and the problems met: both set, or a file that cannot be read. For code that
    /// reads the environment itself (subsctl, the broker's pass-through properties).
    public static func resolvingFiles(
        _ environment: [String: String], include: (String) -> Bool
    ) -> ([String: String], [ConfigurationProblem]) {
        var resolved = environment
        var problems: [ConfigurationProblem] = []
        for (key, path) in environment where key.hasSuffix("_FILE") && key.count > 5 && !path.isEmpty {
            let name = String(key.dropLast(5))
            guard include(name) else { continue }
            resolved[key] = nil
            if let direct = environment[name], !direct.isEmpty {
                problems.append(ConfigurationProblem(name: key, value: path, expected: "\(name) or \(key), not both"))
            } else if let content = read(path) {
                resolved[name] = content
            } else {
                problems.append(ConfigurationProblem(name: key, value: path, expected: "the path of a readable file holding \(name)"))
            }
        }
        return (resolved, problems.sorted { $0.name < $1.name })
    }

    /// A file's text without its trailing line breaks (`echo` and editors add one).
    static func read(_ path: String) -> String? {
        guard var content = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        while content.last?.isNewline == true { content.removeLast() }
        return content
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

    /// Records a problem (once: a setting read twice reports it once).
    public func report(_ name: String, _ value: String?, _ expected: String) {
        let problem = ConfigurationProblem(name: name, value: value, expected: expected)
        if !problems.contains(problem) { problems.append(problem) }
    }

    public func validate() throws(ConfigurationError) {
        if !problems.isEmpty { throw ConfigurationError(problems: problems) }
    }
}
