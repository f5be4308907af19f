import Foundation

/// A service binary of this package started by a test, with its output captured in a log file.
public final class ServiceProcess: @unchecked Sendable {
    // Invariant: `process` is only started once, in init; afterwards only its thread-safe
    // members (isRunning, processIdentifier, terminate, waitUntilExit) are used.
    public let name: String
    public let logFile: URL
    private let process: Process

    /// Where `swift build` put the executables: `SUBS_BIN_DIR` (set by the test command), else `.build/debug`.
    public static var binaryDirectory: URL {
        if let dir = ProcessInfo.processInfo.environment["SUBS_BIN_DIR"], !dir.isEmpty {
            return URL(fileURLWithPath: dir)
        }
        return packageRoot.appendingPathComponent(".build/debug")
    }

    /// The repository root, found from this file's location.
    public static var packageRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
    }

    /// The local state folder as deploy/local/env.sh finds it (`SUBS_STATE_DIR`, else `.local`):
    /// another checkout's may be shared, with its venv and services.
    public static var localState: URL {
        ProcessInfo.processInfo.environment["SUBS_STATE_DIR"].map { URL(fileURLWithPath: $0) }
            ?? packageRoot.appendingPathComponent(".local")
    }

    /// Starts `executable` (a product name such as `fulfillment`) with the test's environment plus `environment`.
    public convenience init(executable: String, name: String, environment: [String: String], arguments: [String] = []) throws {
        let binary = Self.binaryDirectory.appendingPathComponent(executable)
        guard FileManager.default.isExecutableFile(atPath: binary.path) else {
            throw MissingServiceError(variable: "executable \(binary.path) (build with `swift build` first)")
        }
        try self.init(executablePath: binary.path, name: name, arguments: arguments, environment: environment)
    }

    /// Starts any program with the test's environment plus `environment`: it inherits the local
    /// broker's `KAFKA_PROPERTY_*` tuning with the rest (deploy/local/env.sh), as in-process
    /// clients get it from `TestEnvironment.kafkaConfiguration`.
    public init(executablePath: String, name: String, arguments: [String] = [], environment: [String: String]) throws {
        self.name = name
        let binary = URL(fileURLWithPath: executablePath)
        logFile = FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-\(UUID().uuidString).log")
        _ = FileManager.default.createFile(atPath: logFile.path, contents: nil)
        let handle = try FileHandle(forWritingTo: logFile)
        process = Process()
        process.executableURL = binary
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
    }

    public var pid: Int32 { process.processIdentifier }
    public var isRunning: Bool { process.isRunning }

    /// `kill -9`: no chance to finish anything, as in a crash.
    public func kill() {
        Foundation.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// SIGTERM, then waits for the exit; returns the exit status (nil if it had to be killed).
    @discardableResult
    public func terminate(timeout: TimeInterval = 30) async -> Int32? {
        guard process.isRunning else { return process.terminationStatus }
        Foundation.kill(process.processIdentifier, SIGTERM)
        return await waitForExit(timeout: timeout)
    }

    /// Waits for the process to end by itself; its exit status, or nil (and killed) after `timeout`.
    public func waitForExit(timeout: TimeInterval) async -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning, Date() < deadline { try? await Task.sleep(for: .milliseconds(50)) }
        guard !process.isRunning else {
            kill()
            return nil
        }
        return process.terminationStatus
    }

    /// Everything the process wrote so far.
    public var output: String { (try? String(contentsOf: logFile, encoding: .utf8)) ?? "" }

    /// Waits until the output contains `text`; false on timeout or if the process exited first.
    public func waitForOutput(_ text: String, timeout: TimeInterval) async -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if output.contains(text) { return true }
            if !process.isRunning { return output.contains(text) }
            try? await Task.sleep(for: .milliseconds(100))
        }
        return false
    }

    /// The HTTP port the service logged (`"http.port":N`), for services started on port 0 so the
    /// kernel picks a port nobody else can take between choosing and binding it.
    /// The ingress's is on its "ingress listening" line: its probes' listener starts (and logs
    /// its own `http.port`) first, before the schema is there.
    public var httpPort: Int? {
        let log = output
        let pattern = log.contains(#""message":"ingress listening""#) ? #""ingress listening","http.port":\d+"# : #""http.port":\d+"#
        guard let range = log.range(of: pattern, options: .regularExpression) else { return nil }
        return log[range].split(separator: ":").last.flatMap { Int($0) }
    }

    /// The internal listener's port the ingress logged (`"internal.http.port":N`).
    public var internalHTTPPort: Int? {
        let log = output
        guard let range = log.range(of: #""internal.http.port":(\d+)"#, options: .regularExpression) else { return nil }
        return Int(log[range].dropFirst("\"internal.http.port\":".count))
    }

    deinit {
        if process.isRunning { Foundation.kill(process.processIdentifier, SIGKILL) }
    }
}

/// Polls `condition` every `interval` until it holds or `timeout` seconds pass (then checks it
/// once more): the tests' one way to wait for an asynchronous effect. The timeout only bounds a
/// failing test; it is never what a test measures.
public func eventually(
    timeout: TimeInterval = 30, every interval: Duration = .milliseconds(200), _ condition: () async throws -> Bool
) async rethrows -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int64(timeout * 1000))
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: interval)
    }
    return try await condition()
}
