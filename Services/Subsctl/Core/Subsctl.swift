import Foundation
import ServiceRuntime

/// One `subsctl` subcommand. Add a type conforming to this in its own file and list it in
/// `Subsctl.commands`.
protocol SubsctlCommand {
    /// The words that select it, e.g. ["bench", "verify"].
    static var path: [String] { get }
    /// The usage line after `subsctl`.
    static var usage: String { get }
    static var summary: String { get }
    /// Runs with the arguments after the command words; returns the exit status.
    static func run(_ arguments: ParsedArguments) async -> Int32
}

extension SubsctlCommand {
    /// Reports a usage mistake with the command's usage line.
    static func usageError(_ message: String) -> Int32 {
        Subsctl.printError("\(message)\nusage: subsctl \(usage)")
        return ExitStatus.usage
    }

    /// The usage error for an option the command did not read, else for a positional (it takes
    /// none; `refusal` words it); nil when every argument was used.
    static func unusedArgumentsError(
        _ arguments: ParsedArguments, refusal: (String) -> String = { "unexpected argument \($0)" }
    ) -> Int32? {
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        if let first = arguments.positionals.first { return usageError(refusal(first)) }
        return nil
    }
}

/// Exit statuses (sysexits.h where one fits).
enum ExitStatus {
    static let success: Int32 = 0
    /// The input was checked and refused (e.g. a signature that does not verify).
    static let refused: Int32 = 1
    static let usage: Int32 = 64
    static let noInput: Int32 = 66
    /// Try again later (e.g. an OCSP responder was unreachable).
    static let temporaryFailure: Int32 = 75
    static let configuration: Int32 = 78
}

/// The `subsctl` command line: the table of commands and what they share.
public enum Subsctl {
    static var commands: [any SubsctlCommand.Type] {
        [
            VerifyCommand.self, BenchVerifyCommand.self, CatalogApplyCommand.self, DevTokenCommand.self, DemoSignerCommand.self,
            DemoCommand.self, BenchSignNotificationsCommand.self, RequeryCommand.self, RecoverCommand.self,
            ConsentCommand.self, ConsentRestoreCommand.self, TestUserCommand.self, ReplayCommand.self, RatesApplyCommand.self,
            TasksCommand.self,
            CreditsRunJobsCommand.self,
            CreditsAdjustCommand.self, MigrateCommand.self, ChainAttributeCommand.self, ChainUnfreezeCommand.self,
            AppleTestNotificationCommand.self, AppleExtendCommand.self, AppleExtendAllCommand.self,
            AppleMessagesUploadCommand.self, AppleMessagesListCommand.self, AppleMessagesDeleteCommand.self,
            AppleMessagesImageUploadCommand.self, AppleMessagesImageListCommand.self, AppleMessagesDefaultSetCommand.self,
            AppleMessagesDefaultShowCommand.self, AppleMessagesDefaultDeleteCommand.self, AppleMessagesCheckCommand.self,
            ChainRequeryCommand.self, LookupCommand.self,
            EventsListCommand.self, EventsSummaryCommand.self, EntitlementGrantCommand.self, EntitlementRevokeCommand.self,
            EntitlementShowCommand.self,
            WebhooksCreateCommand.self, WebhooksListCommand.self, WebhooksShowCommand.self, WebhooksDeleteCommand.self,
            WebhooksRotateSecretCommand.self, WebhooksDeliveriesCommand.self, WebhooksRetryCommand.self,
        ]
    }

    /// Where diagnostics go: stderr, so stdout stays the command's output alone.
    static let logger = Logger(label: "subsctl", sink: LogSink(fileDescriptor: STDERR_FILENO))

    /// Runs the command `arguments` name (without the program name) with `environment` as its only
    /// environment variables; returns the exit status. What it prints goes to `output` (the result)
    /// and `error` (diagnostics and progress), each call one whole piece of text; `-` as a file
    /// reads `input`. Log lines stay the process's: on its stderr, at its `LOG_LEVEL`.
    public static func run(
        arguments: [String], environment: [String: String],
        input: @escaping @Sendable () -> Data = readStandardInput,
        output: @escaping @Sendable (String) -> Void = writeStandardOutput,
        error: @escaping @Sendable (String) -> Void = writeStandardError
    ) async -> Int32 {
        // Secrets given as files (`X_FILE`), as the services read them.
        let (resolved, problems) = ConfigurationReader.resolvingFiles(environment) {
            ConfigurationReader.secretSettings.contains($0)
        }
        guard problems.isEmpty else {
            error(problems.map { "subsctl: \($0)\n" }.joined())
            return ExitStatus.configuration
        }
        let invocation = Invocation(environment: resolved, readInput: input, writeOutput: output, writeError: error)
        return await Invocation.$current.withValue(invocation) { await run(arguments) }
    }

    /// The process's own standard streams: what `run` reads and writes unless given others.
    public static let readStandardInput: @Sendable () -> Data = { FileHandle.standardInput.readDataToEndOfFile() }
    public static let writeStandardOutput: @Sendable (String) -> Void = { FileHandle.standardOutput.write(Data($0.utf8)) }
    public static let writeStandardError: @Sendable (String) -> Void = { FileHandle.standardError.write(Data($0.utf8)) }

    /// The environment variables of the run under way.
    static var environment: [String: String] { Invocation.current.environment }

    private static func run(_ arguments: [String]) async -> Int32 {
        if arguments.isEmpty || arguments == ["help"] || arguments == ["--help"] || arguments == ["-h"] {
            printUsage(to: arguments.isEmpty ? Invocation.current.writeError : Invocation.current.writeOutput)
            return arguments.isEmpty ? ExitStatus.usage : ExitStatus.success
        }
        if arguments == ["--version"] || arguments == ["version"] {
            printOutput(BuildInfo.versionLine(of: "subsctl"))
            return ExitStatus.success
        }
        let options = arguments.prefix { $0 != "--" }
        let wantsHelp = options.contains("--help") || options.contains("-h")
        // The longest command path that prefixes the arguments wins.
        let match = commands.filter { arguments.starts(with: $0.path) }.max { $0.path.count < $1.path.count }
        guard let command = match else {
            // The first words of a group of commands (`subsctl chain --help`): the group's usage.
            let words = Array(arguments.prefix { !$0.hasPrefix("-") })
            let group = commands.filter { !words.isEmpty && $0.path.starts(with: words) }
            if !group.isEmpty {
                printUsage(of: group, to: wantsHelp ? Invocation.current.writeOutput : Invocation.current.writeError)
                return wantsHelp ? ExitStatus.success : ExitStatus.usage
            }
            printError("unknown command '\(arguments.joined(separator: " "))'")
            printUsage(to: Invocation.current.writeError)
            return ExitStatus.usage
        }
        if wantsHelp {
            printOutput("usage: subsctl \(command.usage)\n\n\(command.summary)")
            return ExitStatus.success
        }
        do {
            return await command.run(try ParsedArguments(Array(arguments.dropFirst(command.path.count))))
        } catch {
            printError("\(error.description)\nusage: subsctl \(command.usage)")
            return ExitStatus.usage
        }
    }

    static func printUsage(to write: (String) -> Void) {
        printUsage(of: commands, to: write, header: "usage: subsctl <command> [options] (--help after any command, --version)\n\n")
    }

    static func printUsage(of commands: [any SubsctlCommand.Type], to write: (String) -> Void, header: String = "") {
        var text = header + "commands:\n"
        for command in commands { text += "  subsctl \(command.usage)\n      \(command.summary)\n" }
        write(text)
    }

    /// Progress of a long operation, for the person watching: on stderr, so stdout stays the result.
    static func printProgress(_ message: String) {
        Invocation.current.writeError("subsctl: " + message + "\n")
    }

    static func printError(_ message: String) {
        Invocation.current.writeError("subsctl: " + message + "\n")
    }

    static func printOutput(_ text: String) {
        Invocation.current.writeOutput(text.hasSuffix("\n") ? text : text + "\n")
    }

    /// A list: `{"items": …}` with `--json` (the admin API's lists), else `line` of each item.
    static func printItems<Item: Encodable>(_ items: [Item], asJSON: Bool, line: (Item) -> String) throws {
        try printResult(["items": items], asJSON: asJSON) { items.map(line).joined(separator: "\n") }
    }

    /// A command's result: `value` as one line of JSON with `--json` (the admin API's conventions:
    /// sorted keys, RFC 3339 dates), else the operator's `text`.
    static func printResult(_ value: some Encodable, asJSON: Bool, text: () -> String) throws {
        guard asJSON else { return printOutput(text()) }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(RFC3339.string(from: date))
        }
        printOutput(String(decoding: try encoder.encode(value), as: UTF8.self))
    }
}

/// Command-line arguments split into `--name value` options, value-less flags (`--json`) and
/// positionals. `-` alone is a positional (stdin); `--` ends the options.
struct ParsedArguments {
    /// Options that take no value.
    static let flags: Set<String> = ["json", "help", "check", "no-wait"]

    struct UsageError: Error, CustomStringConvertible {
        let description: String
    }

    private(set) var options: [String: String] = [:]
    private(set) var positionals: [String] = []
    private var consumed: Set<String> = []

    init(_ arguments: [String]) throws(UsageError) {
        var index = 0
        var optionsEnded = false
        while index < arguments.count {
            let argument = arguments[index]
            if !optionsEnded && argument == "--" {
                optionsEnded = true
            } else if !optionsEnded && argument.hasPrefix("--") {
                let name = String(argument.dropFirst(2))
                if let equals = name.firstIndex(of: "=") {
                    options[String(name[..<equals])] = String(name[name.index(after: equals)...])
                } else if Self.flags.contains(name) {
                    options[name] = "true"
                } else {
                    guard index + 1 < arguments.count else { throw UsageError(description: "option --\(name) needs a value") }
                    index += 1
                    options[name] = arguments[index]
                }
            } else {
                positionals.append(argument)
            }
            index += 1
        }
    }

    mutating func option(_ name: String) -> String? {
        consumed.insert(name)
        return options[name]
    }

    /// Whether a value-less flag such as `--json` was given.
    mutating func flag(_ name: String) -> Bool { option(name) != nil }

    /// `--user-id`; `--user` is still read, with a warning, as its deprecated spelling.
    mutating func userID() -> String? {
        if let deprecated = option("user") {
            Subsctl.printError("--user is deprecated: use --user-id")
            return option("user-id") ?? deprecated
        }
        return option("user-id")
    }

    /// `--operator`, else the login name: who an audit row names.
    mutating func operatorName() -> String {
        option("operator") ?? Subsctl.environment["USER"] ?? "subsctl"
    }

    /// Fails on options the command did not ask for (typos must not be ignored silently).
    func checkAllOptionsUsed() throws(UsageError) {
        let unknown = Set(options.keys).subtracting(consumed)
        guard unknown.isEmpty else {
            throw UsageError(description: "unknown option " + unknown.sorted().map { "--\($0)" }.joined(separator: ", "))
        }
    }
}
