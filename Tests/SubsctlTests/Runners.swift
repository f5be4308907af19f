import Foundation
import SubsctlCore
import Synchronization
import TestSupport

/// What one run of subsctl returned and printed.
struct SubsctlRun {
    let status: Int32
    let stdout: String
    let stderr: String
    /// The last line on stderr: the error, after any earlier lines (e.g. a deprecation warning).
    var error: String { String(stderr.split(separator: "\n").last ?? "") }
}

/// Runs a subsctl command in this process through `Subsctl.run`, with only the environment the
/// test gives (inherited APPLE_IAP_* settings must not leak in) and its streams captured.
enum SubsctlInProcess {
    static func run(_ arguments: [String], environment: [String: String], stdin: String? = nil) async -> SubsctlRun {
        let input = Data((stdin ?? "").utf8)
        let stdout = CapturedText()
        let stderr = CapturedText()
        let status = await Subsctl.run(
            arguments: arguments, environment: environment, input: { input }, output: stdout.append, error: stderr.append)
        return SubsctlRun(status: status, stdout: stdout.text, stderr: stderr.text)
    }
}

/// Text a run writes from whichever task, read once the run is over.
final class CapturedText: Sendable {
    private let storage = Mutex("")

    @Sendable func append(_ piece: String) { storage.withLock { $0 += piece } }
    var text: String { storage.withLock { $0 } }
}

/// Runs the built `subsctl` binary (SUBS_BIN_DIR, else .build/debug) and captures its output: for
/// what only a process shows, its exit status and which descriptor each line goes to.
enum SubsctlBinary {
    struct MissingBinary: Error, CustomStringConvertible {
        let path: String
        var description: String { "executable \(path) is missing: build with `swift build` first" }
    }

    /// Runs subsctl and waits for it off the concurrency pool (`blocking`).
    static func run(_ arguments: [String], environment: [String: String], stdin: String? = nil) async throws -> SubsctlRun {
        try await blocking { try runWaiting(arguments, environment: environment, stdin: stdin) }
    }

    private static func runWaiting(_ arguments: [String], environment: [String: String], stdin: String?) throws -> SubsctlRun {
        let binary = ServiceProcess.binaryDirectory.appendingPathComponent("subsctl")
        guard FileManager.default.isExecutableFile(atPath: binary.path) else {
            throw MissingBinary(path: binary.path)
        }
        let process = Process()
        process.executableURL = binary
        process.arguments = arguments
        // Only what the test gives: inherited APPLE_IAP_* settings must not leak in.
        process.environment = environment.merging(["PATH": "/usr/bin:/bin", "LOG_LEVEL": "warning"]) { own, _ in own }
        // stderr goes to a file: two pipes read one after the other could block the child.
        let errorFile = FileManager.default.temporaryDirectory.appendingPathComponent("subsctl-err-\(UUID().uuidString)")
        _ = FileManager.default.createFile(atPath: errorFile.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: errorFile) }
        let out = Pipe()
        let input = Pipe()
        process.standardOutput = out
        process.standardError = try FileHandle(forWritingTo: errorFile)
        process.standardInput = input
        try process.run()
        if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
        try input.fileHandleForWriting.close()
        let stdoutData = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return SubsctlRun(
            status: process.terminationStatus, stdout: String(decoding: stdoutData, as: UTF8.self),
            stderr: (try? String(contentsOf: errorFile, encoding: .utf8)) ?? "")
    }
}
