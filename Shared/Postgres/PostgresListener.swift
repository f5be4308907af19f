import Foundation
import ServiceRuntime
import Synchronization

/// One NOTIFY received.
public struct PostgresNotification: Sendable, Hashable {
    public let channel: String
    public let payload: String

    public init(channel: String, payload: String) {
        self.channel = channel
        self.payload = payload
    }
}

/// The notifications of one LISTEN channel, until `close()` (or the pool's shutdown).
///
/// Iterate it from one task only (it is backed by an `AsyncStream`).
public struct PostgresListener: AsyncSequence, Sendable {
    public typealias Element = PostgresNotification

    private let stream: AsyncStream<PostgresNotification>
    private let worker: ListenerWorker

    init(stream: AsyncStream<PostgresNotification>, worker: ListenerWorker) {
        self.stream = stream
        self.worker = worker
    }

    public func makeAsyncIterator() -> AsyncStream<PostgresNotification>.Iterator { stream.makeAsyncIterator() }

    /// Stops listening and ends the sequence.
    public func close() { worker.close() }
}

/// Runs one LISTEN connection on a thread of its own: libpq is blocking, and `poll()` on the
/// connection's socket plus a wake-up pipe lets the thread sleep until a notification or `close()`.
///
/// `@unchecked Sendable`: the libpq connection exists only as a local of the worker thread;
/// what other threads touch is immutable, the atomic `closed` flag, the pipe (written by
/// `close()`, closed in deinit so never while in use) and the stream continuation (Sendable).
final class ListenerWorker: @unchecked Sendable {
    private let channel: String
    private let settings: ConnectionSettings
    private let logger: Logger
    private let continuation: AsyncStream<PostgresNotification>.Continuation
    private let onClose: @Sendable () -> Void
    private let closed = Atomic<Bool>(false)
    private let wakeRead: Int32
    private let wakeWrite: Int32

    init(
        channel: String, settings: ConnectionSettings, logger: Logger,
        continuation: AsyncStream<PostgresNotification>.Continuation, onClose: @escaping @Sendable () -> Void
    ) throws {
        var descriptors: [Int32] = [-1, -1]
        guard pipe(&descriptors) == 0 else { throw PostgresError.connectionFailed("cannot create a pipe") }
        // Close-on-exec: a process the service spawns must not inherit the pipe.
        for descriptor in descriptors { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
        self.channel = channel
        self.settings = settings
        self.logger = logger
        self.continuation = continuation
        self.onClose = onClose
        wakeRead = descriptors[0]
        wakeWrite = descriptors[1]
    }

    deinit {
        Foundation.close(wakeRead)
        Foundation.close(wakeWrite)
    }

    /// Starts the thread; returns once the first LISTEN is in place, or throws why it is not.
    func start() async throws {
        try await withCheckedThrowingContinuation { (started: CheckedContinuation<Void, any Error>) in
            let thread = Thread { self.main(started: started) }
            thread.name = "postgres-listen"
            thread.start()
        }
        continuation.onTermination = { [weak self] _ in self?.close() }
    }

    func close() {
        guard !closed.exchange(true, ordering: .sequentiallyConsistent) else { return }
        var byte: UInt8 = 1
        _ = write(wakeWrite, &byte, 1)
        onClose()
    }

    private var isClosed: Bool { closed.load(ordering: .sequentiallyConsistent) }

    private func main(started: CheckedContinuation<Void, any Error>) {
        var connection: LibpqConnection
        do {
            connection = try listen()
        } catch {
            started.resume(throwing: error)
            continuation.finish()
            return
        }
        started.resume()
        var current: LibpqConnection? = connection
        var backoff = 0.1
        while !isClosed {
            guard let live = current else {
                if wait(socket: nil, seconds: backoff) { continue }
                do {
                    connection = try listen()
                    current = connection
                    backoff = 0.1
                    logger.notice("PostgreSQL listener reconnected; notifications sent meanwhile are lost")
                } catch {
                    backoff = min(backoff * 2, 5)
                    logger.warning(
                        "PostgreSQL listener cannot reconnect",
                        ["error": .string((error as? PostgresError)?.debugDescription ?? "\(error)")])
                }
                continue
            }
            let socket = live.socket
            if socket >= 0, wait(socket: socket, seconds: nil) { continue }
            let alive = socket >= 0 && live.consumeInput()
            for notification in live.notifications() { continuation.yield(notification) }
            if !alive {
                logger.warning("PostgreSQL listener connection lost", ["error": .string(live.errorMessage)])
                current = nil
            }
        }
        continuation.finish()
    }

    private func listen() throws -> LibpqConnection {
        let connection = try LibpqConnection.connect(settings, logger: logger)
        _ = try connection.exec("LISTEN " + PostgresQuery.quoteIdentifier(channel))
        return connection
    }

    /// Sleeps until the socket is readable (or broken), `seconds` elapse, or `close()` is called;
    /// true when woken by `close()`.
    private func wait(socket: Int32?, seconds: Double?) -> Bool {
        var descriptors = [pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
        if let socket { descriptors.append(pollfd(fd: socket, events: Int16(POLLIN), revents: 0)) }
        let timeout = seconds.map { Int32($0 * 1000) } ?? -1
        while poll(&descriptors, nfds_t(descriptors.count), timeout) < 0, errno == EINTR {}
        return descriptors[0].revents != 0 || isClosed
    }
}
