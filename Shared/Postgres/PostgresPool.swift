import ServiceRuntime
import Synchronization

/// A bounded pool of PostgreSQL connections, opened lazily and replaced when they break.
///
/// Callers beyond `maximumConnections` wait in FIFO order for at most `acquireTimeout`. A
/// connection that sat idle is checked (without a round trip) before being lent, so after a
/// server restart the next caller gets a fresh connection; a statement that was running when
/// the connection broke fails with the retryable `.connectionFailed`.
public final class PostgresPool: Service, Sendable {
    public let configuration: PostgresConfiguration
    private let settings: ConnectionSettings
    private let logger: Logger
    private let metrics = PostgresMetrics()
    private let state = Mutex(State())
    private let stopped = ShutdownTrigger()

    /// Either a connection to reuse or the right to open a new one (already counted in `open`).
    private enum Grant: Sendable {
        case connection(PostgresConnection)
        case slot
    }

    private struct Waiter {
        let id: Int
        let continuation: CheckedContinuation<Grant, any Error>
        /// When the caller gives up with `.acquireTimeout` (enforced by the reaper).
        let deadline: ContinuousClock.Instant
    }

    private struct State {
        var closed = false
        /// Connections open or being opened, lent or idle.
        var open = 0
        var idle: [PostgresConnection] = []
        var waiters: [Waiter] = []
        var nextID = 0
        var listeners: [Int: ListenerWorker] = [:]
        /// Whether the task expiring overdue waiters runs (at most one, while there are waiters).
        var reaping = false

        mutating func makeID() -> Int {
            nextID += 1
            return nextID
        }

        /// What a caller gets right now, if anything: the most recently used idle connection
        /// (its statements are prepared, its pages warm), else a new slot while below the maximum.
        mutating func immediateGrant(maximum: Int) -> Grant? {
            if let connection = idle.popLast() { return .connection(connection) }
            guard open < maximum else { return nil }
            open += 1
            return .slot
        }
    }

    public init(configuration: PostgresConfiguration, logger: Logger) {
        self.configuration = configuration
        self.settings = ConnectionSettings(configuration)
        self.logger = logger
    }

    public var name: String { "postgres" }

    /// Returns when the pool has been shut down. Connections open on demand, not here.
    public func run() async throws {
        await stopped.wait()
    }

    /// Fails the waiting callers, closes idle connections and listeners; lent connections are
    /// closed when returned.
    public func shutdown() async {
        let (waiters, idle, listeners) = state.withLock { s in
            let taken = (s.waiters, s.idle, Array(s.listeners.values))
            s.closed = true
            s.open -= s.idle.count
            s.waiters = []
            s.idle = []
            s.listeners = [:]
            return taken
        }
        for waiter in waiters {
            waiter.continuation.resume(throwing: PostgresError.poolClosed)
        }
        idle.forEach(close)
        listeners.forEach { $0.close() }
        stopped.fire()
    }

    /// Counts of connections and waiting callers, for health checks and tests.
    public var statistics: PostgresPoolStatistics {
        state.withLock { PostgresPoolStatistics(open: $0.open, idle: $0.idle.count, waiting: $0.waiters.count) }
    }

    /// Lends a connection to `body` and takes it back afterwards, whatever happens. `body`'s
    /// nonisolated code runs on the connection's own thread, so its statements cost no hand-off.
    @discardableResult
    public func withConnection<R: Sendable>(_ body: (PostgresConnection) async throws -> R) async throws -> R {
        var connection: PostgresConnection
        // A connection that sat idle is checked on its thread, in the same hop as `body`.
        var fromIdleList: Bool
        switch try await grant() {
        case .connection(let idle): (connection, fromIdleList) = (idle, true)
        case .slot: (connection, fromIdleList) = (try await openConnection(), false)
        }
        while true {
            let loan: PostgresConnection.Loan<R>
            do {
                loan = try await connection.lend(checkingIdleHealth: fromIdleList, body)
            } catch {
                release(connection)
                throw error
            }
            switch loan {
            case .done(let result):
                release(connection)
                return result
            case .brokenWhileIdle:
                logger.notice("discarding a broken idle PostgreSQL connection")
                close(connection)
                connection = try await openConnection()
                fromIdleList = false
            }
        }
    }

    /// BEGIN ... COMMIT; ROLLBACK when `body` throws. With `maxAttempts > 1`, serialization
    /// failures and deadlocks (40001, 40P01) replay the whole body, so it must have no effects
    /// outside the transaction. `readOnly` and `genericPlans` as on `PostgresConnection.transaction`.
    @discardableResult
    public func transaction<R: Sendable>(
        isolation: PostgresIsolation = .readCommitted, readOnly: Bool = false, genericPlans: Bool = false,
        maxAttempts: Int = 1,
        _ body: (PostgresConnection) async throws -> R
    ) async throws -> R {
        var attempt = 1
        while true {
            do {
                return try await withConnection {
                    try await $0.transaction(isolation: isolation, readOnly: readOnly, genericPlans: genericPlans, body)
                }
            } catch let error as PostgresError where error.isSerializationFailure && attempt < maxAttempts {
                logger.debug(
                    "transaction conflict, retrying", ["sql.state": .string(error.sqlState?.rawValue ?? ""), "attempt": .int(Int64(attempt))])
                // A random pause desynchronises the transactions that collided.
                try await Task.sleep(for: .milliseconds(Int.random(in: 1...(5 * attempt))))
                attempt += 1
            }
        }
    }

    /// One statement on any free connection.
    @discardableResult
    public func query(_ query: PostgresQuery) async throws -> PostgresRows {
        try await withConnection { try await $0.query(query) }
    }

    /// Sends a notification to the listeners of `channel` (delivered when the transaction, here
    /// the statement, commits).
    public func notify(_ channel: String, payload: String) async throws {
        try await query("SELECT pg_notify(\(channel), \(payload))")
    }

    /// Listens on `channel` over a dedicated connection (outside `maximumConnections`) that is
    /// reopened, and LISTENs again, when it breaks. Notifications sent while it was
    /// disconnected are lost, so consumers should also poll now and then.
    public func listen(_ channel: String) async throws -> PostgresListener {
        let id = try state.withLock { s in
            if s.closed { throw PostgresError.poolClosed }
            return s.makeID()
        }
        let (stream, continuation) = AsyncStream.makeStream(of: PostgresNotification.self)
        let worker = try ListenerWorker(
            channel: channel, settings: settings, logger: logger.with(["postgres.channel": .string(channel)]),
            continuation: continuation
        ) { [weak self] in
            _ = self?.state.withLock { $0.listeners.removeValue(forKey: id) }
        }
        try await worker.start()
        let registered = state.withLock { s in
            if s.closed { return false }
            s.listeners[id] = worker
            return true
        }
        if !registered {
            worker.close()
            throw PostgresError.poolClosed
        }
        return PostgresListener(stream: stream, worker: worker)
    }

    private func grant() async throws -> Grant {
        let maximum = max(1, configuration.maximumConnections)
        let immediate = try state.withLock { s -> Grant? in
            if s.closed { throw PostgresError.poolClosed }
            return s.immediateGrant(maximum: maximum)
        }
        if let immediate { return immediate }
        let id = state.withLock { $0.makeID() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                // Decided again under the lock: a connection may have come back meanwhile.
                let (outcome, startReaper) = state.withLock { s -> (Result<Grant, any Error>?, Bool) in
                    if s.closed { return (.failure(PostgresError.poolClosed), false) }
                    if Task.isCancelled { return (.failure(CancellationError()), false) }
                    if let grant = s.immediateGrant(maximum: maximum) { return (.success(grant), false) }
                    let deadline = ContinuousClock.now + configuration.acquireTimeout
                    s.waiters.append(Waiter(id: id, continuation: continuation, deadline: deadline))
                    let startReaper = !s.reaping
                    s.reaping = true
                    return (nil, startReaper)
                }
                if let outcome { continuation.resume(with: outcome) }
                if startReaper { Task { [weak self] in await self?.reap() } }
            }
        } onCancel: {
            expire(id, with: CancellationError())
        }
    }

    private func expire(_ id: Int, with error: any Error) {
        let waiter = state.withLock { s -> Waiter? in
            guard let index = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return s.waiters.remove(at: index)
        }
        guard let waiter else { return }
        waiter.continuation.resume(throwing: error)
    }

    /// Fails the waiters whose deadline passed; runs while anyone waits. One task for all waiters,
    /// instead of a sleeping task per waiter that each hand-off had to cancel (and so wake).
    /// Waiters queue in order with the same timeout, so the first one is due first.
    private func reap() async {
        while true {
            let next = state.withLock { s -> ContinuousClock.Instant? in
                guard let first = s.waiters.first else {
                    s.reaping = false
                    return nil
                }
                return first.deadline
            }
            guard let next else { return }
            try? await Task.sleep(until: next, clock: .continuous)
            let now = ContinuousClock.now
            let overdue = state.withLock { s -> [Waiter] in
                let overdue = s.waiters.filter { $0.deadline <= now }
                s.waiters.removeAll { $0.deadline <= now }
                return overdue
            }
            metrics.acquireTimeouts.increment(by: overdue.count)
            for waiter in overdue { waiter.continuation.resume(throwing: PostgresError.acquireTimeout) }
        }
    }

    /// Opens a connection in a slot already counted; gives the slot back when that fails.
    private func openConnection() async throws -> PostgresConnection {
        let id = state.withLock { $0.makeID() }
        do {
            let connection = try await PostgresConnection.connect(
                settings, id: id, cacheCapacity: configuration.statementCacheCapacity, metrics: metrics,
                logger: logger)
            metrics.connectionsOpen.add(1)
            return connection
        } catch {
            metrics.connectFailures.increment()
            logger.warning(
                "could not open a PostgreSQL connection",
                ["error": .string((error as? PostgresError)?.debugDescription ?? "\(error)")])
            releaseSlot()
            throw error
        }
    }

    /// Takes a connection back: to the longest waiting caller, else to the idle list; closed
    /// instead when broken or left inside a transaction.
    private func release(_ connection: PostgresConnection) {
        enum Outcome {
            case kept
            case handedTo(Waiter)
            case closed
        }
        let reusable = connection.isReusable
        let outcome = state.withLock { s -> Outcome in
            guard reusable, !s.closed else { return .closed }
            guard !s.waiters.isEmpty else {
                s.idle.append(connection)
                return .kept
            }
            return .handedTo(s.waiters.removeFirst())
        }
        switch outcome {
        case .kept:
            break
        case .handedTo(let waiter):
            waiter.continuation.resume(returning: .connection(connection))
        case .closed:
            if !reusable { logger.notice("closing a PostgreSQL connection that broke or was left in a transaction") }
            close(connection)
            releaseSlot()
        }
    }

    /// A slot freed by a closed connection or a failed connect: the longest waiting caller may
    /// open a connection in it, else the pool shrinks.
    private func releaseSlot() {
        let waiter = state.withLock { s -> Waiter? in
            guard !s.closed, !s.waiters.isEmpty else {
                s.open -= 1
                return nil
            }
            return s.waiters.removeFirst()
        }
        waiter?.continuation.resume(returning: .slot)
    }

    private func close(_ connection: PostgresConnection) {
        connection.close()
        metrics.connectionsOpen.add(-1)
    }
}

/// A snapshot of a pool's counters.
public struct PostgresPoolStatistics: Sendable, Equatable {
    /// Connections open or being opened, lent or idle.
    public let open: Int
    public let idle: Int
    /// Callers waiting for a connection.
    public let waiting: Int

    public init(open: Int, idle: Int, waiting: Int) {
        self.open = open
        self.idle = idle
        self.waiting = waiting
    }
}
