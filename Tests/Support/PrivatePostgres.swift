import Foundation

/// A throwaway PostgreSQL cluster (own data directory, own port) for tests that stop, restart
/// or otherwise disturb the server, which they must never do to the shared one.
///
/// Server binaries refuse to run as root, so when the tests run as root they go through
/// `runuser -u postgres`. Use `PrivatePostgres.with { ... }`, which always removes the cluster.
public final class PrivatePostgres: Sendable {
    public let port: Int
    public let directory: URL
    private let binaries: URL

    /// Superuser URI (trust authentication on 127.0.0.1).
    public var url: String { "postgresql://postgres@127.0.0.1:\(port)/postgres" }

    private var dataDirectory: String { directory.appendingPathComponent("data").path }
    private var commandLog: URL { directory.appendingPathComponent("commands.log") }

    private init(port: Int, directory: URL, binaries: URL) {
        self.port = port
        self.directory = directory
        self.binaries = binaries
    }

    /// Creates and starts a cluster, runs `body`, then stops and deletes the cluster.
    public static func with<R: Sendable>(_ body: (PrivatePostgres) async throws -> R) async throws -> R {
        let cluster = try await create()
        do {
            try await cluster.start()
            let result = try await body(cluster)
            await cluster.destroy()
            return result
        } catch {
            await cluster.destroy()
            throw error
        }
    }

    /// initdb into a fresh temporary directory; `PG_BIN` overrides where the binaries are.
    public static func create() async throws -> PrivatePostgres {
        let binaries = URL(
            fileURLWithPath: ProcessInfo.processInfo.environment["PG_BIN"] ?? "/usr/lib/postgresql/15/bin")
        let directory = URL(fileURLWithPath: NSTemporaryDirectory())
            .appendingPathComponent("pgtest-\(UUID().uuidString.prefix(8).lowercased())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: false)
        if getuid() == 0 {
            guard let owner = getpwnam("postgres") else { throw PrivatePostgresError("no postgres user to run the server") }
            guard chown(directory.path, owner.pointee.pw_uid, owner.pointee.pw_gid) == 0 else {
                throw PrivatePostgresError("cannot give \(directory.path) to the postgres user")
            }
        }
        let cluster = PrivatePostgres(port: freeTCPPort(), directory: directory, binaries: binaries)
        do {
            try await cluster.run(
                "initdb", ["-D", cluster.dataDirectory, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"])
            // Settings for a small, fast, disposable server reachable only locally.
            let settings = """

                listen_addresses = '127.0.0.1'
                port = \(cluster.port)
                unix_socket_directories = '\(directory.path)'
                max_connections = 40
                shared_buffers = 16MB
                fsync = off
                synchronous_commit = off
                full_page_writes = off

                """
            let configuration = FileHandle(forWritingAtPath: cluster.dataDirectory + "/postgresql.conf")
            try configuration?.seekToEnd()
            try configuration?.write(contentsOf: Data(settings.utf8))
            try configuration?.close()
        } catch {
            await cluster.destroy()
            throw error
        }
        return cluster
    }

    public func start() async throws {
        try await run("pg_ctl", ["-D", dataDirectory, "-l", directory.appendingPathComponent("server.log").path, "-w", "-t", "60", "start"])
    }

    /// Fast shutdown (sessions are terminated) then start again, on the same port.
    public func restart() async throws {
        try await run("pg_ctl", ["-D", dataDirectory, "-m", "fast", "-w", "-t", "60", "restart"])
    }

    public func stop() async throws {
        try await run("pg_ctl", ["-D", dataDirectory, "-m", "fast", "-w", "-t", "60", "stop"])
    }

    /// Stops the server if it runs and deletes its directory; never throws, it is cleanup.
    public func destroy() async {
        try? await run("pg_ctl", ["-D", dataDirectory, "-m", "immediate", "-w", "-t", "60", "stop"])
        try? FileManager.default.removeItem(at: directory)
    }

    /// Runs a server binary as the postgres user, its output appended to `commands.log`.
    private func run(_ tool: String, _ arguments: [String]) async throws {
        let executable = binaries.appendingPathComponent(tool).path
        let command = getuid() == 0 ? ["/usr/sbin/runuser", "-u", "postgres", "--", executable] + arguments : [executable] + arguments
        let log = open(commandLog.path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard log >= 0 else { throw PrivatePostgresError("cannot open \(commandLog.path)") }
        defer { close(log) }
        let status = try await Self.spawnAndWait(command, output: log)
        guard status == 0 else {
            let output = (try? String(contentsOf: commandLog, encoding: .utf8)) ?? ""
            throw PrivatePostgresError(
                "\(tool) \(arguments.joined(separator: " ")) exited with \(status):\n"
                    + output.split(separator: "\n").suffix(20).joined(separator: "\n"))
        }
    }

    /// posix_spawn rather than Foundation's Process: the child must inherit no descriptor but
    /// stdin/stdout/stderr, because `pg_ctl start` leaves a server running, and a server holding
    /// one of the test process's descriptors (Process's own exit-detection socket among them)
    /// keeps it from ever reporting the exit. The wait happens on a thread of its own, off the
    /// cooperative pool. Returns the exit code (or 128 + signal).
    private static func spawnAndWait(_ command: [String], output: Int32) async throws -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, output, 1)
        posix_spawn_file_actions_adddup2(&actions, output, 2)
        // closefrom is not visible to Swift here; close what is open now (closing a descriptor
        // that is gone by then is harmless for posix_spawn).
        let open = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
        for descriptor in open.compactMap({ Int32($0) }) where descriptor > 2 {
            posix_spawn_file_actions_addclose(&actions, descriptor)
        }
        let arguments = command.map { strdup($0) } + [nil]
        defer { arguments.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, command[0], &actions, nil, arguments, environ)
        guard spawned == 0 else { throw PrivatePostgresError("cannot start \(command[0]): error \(spawned)") }
        let child = pid
        return await withCheckedContinuation { continuation in
            Thread {
                var status: Int32 = 0
                while waitpid(child, &status, 0) < 0, errno == EINTR {}
                let signal = status & 0x7F
                continuation.resume(returning: signal == 0 ? (status >> 8) & 0xFF : 128 + signal)
            }.start()
        }
    }
}

/// A step of managing the private cluster failed; the message includes the tool's last output.
public struct PrivatePostgresError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
