import Foundation

/// The command line of a service executable (both services share it): `--version`, `--help` and
/// `--check-config` answer and exit; no argument starts the service. Settings never come from
/// arguments, only from the environment.
public struct ServiceCommandLine<Configuration> {
    /// What an invocation that starts nothing prints and exits with.
    public struct Answer: Equatable, Sendable {
        public var status: Int32
        public var output: String
        public var error: String
    }

    /// The executable's name (`ingress`): the logger's label and the first word of its lines.
    public let name: String
    /// What the executable is, in a sentence, for `--help`.
    public let purpose: String
    /// How start-up reads and validates the settings; `--check-config` calls the same function.
    public let load: ([String: String]) throws(ConfigurationError) -> Configuration

    public init(
        name: String, purpose: String, load: @escaping ([String: String]) throws(ConfigurationError) -> Configuration
    ) {
        self.name = name
        self.purpose = purpose
        self.load = load
    }

    /// Start-up reports an invalid configuration with this status, so `--check-config` does too;
    /// a usage mistake shares it (the shell's convention for both).
    static var invalidStatus: Int32 { 2 }

    public var usage: String {
        """
        usage: \(name) [--check-config | --version | --help]

        \(purpose)

        Every setting is an environment variable (DATABASE_URL, KAFKA_BROKERS, APPLE_IAP_*, ...),
        listed in the "Configuration" and "Apple configuration" tables of README.md. Without an
        option the service starts and runs until SIGTERM or SIGINT.

          --check-config  read and validate the settings as start-up does, print every problem
                          (exit 2) or "configuration ok"; connects to nothing, starts nothing
          --version       print the version and the source revision
          --help          print this help

        """
    }

    /// The answer to `arguments` (those after the program's name), or nil when they ask to start.
    public func answer(_ arguments: [String], environment: [String: String]) -> Answer? {
        guard !arguments.isEmpty else { return nil }
        let options = ["--check-config", "--version", "--help", "-h"]
        if let unknown = arguments.first(where: { !options.contains($0) }) {
            return mistake("unknown argument '\(unknown)' (settings come from environment variables)")
        }
        guard arguments.count == 1 else { return mistake("give one option at a time") }
        switch arguments[0] {
        case "--version":
            return Answer(status: 0, output: BuildInfo.versionLine(of: name) + "\n", error: "")
        case "--check-config":
            do {
                _ = try load(environment)
                return Answer(status: 0, output: "configuration ok\n", error: "")
            } catch {
                return Answer(status: Self.invalidStatus, output: "", error: error.description + "\n")
            }
        default:
            return Answer(status: 0, output: usage, error: "")
        }
    }

    private func mistake(_ message: String) -> Answer {
        Answer(status: Self.invalidStatus, output: "", error: "\(name): \(message)\n\n" + usage)
    }

    /// The executable's whole life: answers the options, or loads the configuration and runs
    /// `start` with it; returns the exit status (2 for an invalid configuration, 1 for an error).
    public func main(
        arguments: [String] = Array(CommandLine.arguments.dropFirst()),
        environment: [String: String] = ProcessInfo.processInfo.environment,
        start: (Configuration, Logger) async throws -> Void
    ) async -> Int32 {
        if let answer = answer(arguments, environment: environment) {
            FileHandle.standardOutput.write(Data(answer.output.utf8))
            FileHandle.standardError.write(Data(answer.error.utf8))
            return answer.status
        }
        let logger = Logger(label: name)
        do {
            try await start(try load(environment), logger)
            return 0
        } catch let error as ConfigurationError {
            logger.critical("invalid configuration", ["error": .string(error.description)])
            FileHandle.standardError.write(Data((error.description + "\n").utf8))
            return Self.invalidStatus
        } catch {
            logger.critical("\(name) stopped on error", ["error": .string("\(error)")])
            return 1
        }
    }
}
