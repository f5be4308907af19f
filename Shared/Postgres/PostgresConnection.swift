import Dispatch
import ServiceRuntime
import Synchronization

/// A database session lent by `PostgresPool` to one closure at a time.
///
/// `@unchecked Sendable` because the libpq handle and the statement cache are touched only on
/// `queue` (serial, so libpq's PGconn is never used by two threads at once) and `health` is a
/// Mutex. The pool lends a connection to one borrower; it must not be kept beyond its closure.
///
/// The borrower's closure runs on `queue` too (the queue is its task executor): its statements
/// then run in place, one thread hand-off per loan instead of two per statement.
public final class PostgresConnection: @unchecked Sendable {
    private let queue: DispatchQueue
    /// Runs the borrower's nonisolated code on `queue`.
    let executor: ConnectionExecutor
    private let libpq: LibpqConnection
    private var statements: StatementCache
    private let health = Mutex(Health())
    private let metrics: PostgresMetrics

    /// What the pool reads between borrowers, refreshed on `queue` after every operation.
    private struct Health {
        var broken = false
        var idle = true
    }

    private init(queue: DispatchQueue, libpq: LibpqConnection, cacheCapacity: Int, metrics: PostgresMetrics) {
        self.queue = queue
        self.executor = ConnectionExecutor(queue: queue)
        self.libpq = libpq
        self.statements = StatementCache(capacity: max(1, cacheCapacity))
        self.metrics = metrics
    }

    /// Opens a connection on its own queue (connecting blocks for up to the connect timeout).
    static func connect(
        _ settings: ConnectionSettings, id: Int, cacheCapacity: Int, metrics: PostgresMetrics, logger: Logger
    ) async throws -> PostgresConnection {
        let queue = DispatchQueue(label: "postgres.connection.\(id)")
        queue.setSpecific(key: ConnectionExecutor.queueKey, value: id)
        return try await withCheckedThrowingContinuation { continuation in
            queue.async {
                do {
                    let libpq = try LibpqConnection.connect(settings, logger: logger)
                    continuation.resume(
                        returning: PostgresConnection(
                            queue: queue, libpq: libpq, cacheCapacity: cacheCapacity, metrics: metrics))
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    /// Runs one statement: prepared on first use of its SQL text, then reused.
    ///
    /// Task cancellation does not interrupt a running statement (a protocol-level cancel can
    /// hit the connection's next statement instead); bound durations with `statement_timeout`
    /// (`options=-c%20statement_timeout%3D5s` in the URL).
    @discardableResult
    public func query(_ query: PostgresQuery) async throws -> PostgresRows {
        try await perform { connection in
            let start = ContinuousClock.now
            defer { connection.metrics.queryDuration.observe(since: start) }
            return try connection.execute(query)
        }
    }

    /// BEGIN ... COMMIT on this connection; ROLLBACK when `body` throws. Not nestable.
    ///
    /// Throws 25P02 instead of committing when a statement failed inside `body` and `body`
    /// swallowed the error (PostgreSQL would silently turn that COMMIT into a ROLLBACK).
    ///
    /// `readOnly` refuses writes. `genericPlans` plans each prepared statement once per connection
    /// (`plan_cache_mode = force_generic_plan`, for this transaction only) instead of again at
    /// every execution: for statements whose parameters are arrays, or that read every monthly
    /// partition, planning was a large share of PostgreSQL's time. Both travel with the BEGIN.
    @discardableResult
    public func transaction<R: Sendable>(
        isolation: PostgresIsolation = .readCommitted, readOnly: Bool = false, genericPlans: Bool = false,
        _ body: (PostgresConnection) async throws -> R
    ) async throws -> R {
        let begin =
            "BEGIN ISOLATION LEVEL \(isolation.sql)\(readOnly ? " READ ONLY" : "")"
            + (genericPlans ? "; SET LOCAL plan_cache_mode = force_generic_plan" : "")
        try await perform { connection in
            if !connection.libpq.isBroken && !connection.libpq.isIdle {
                throw PostgresError.server(
                    sqlState: .activeSQLTransaction, message: "a transaction is already in progress", constraint: nil)
            }
            _ = try connection.libpq.exec(begin)
        }
        let result: R
        do {
            result = try await body(self)
        } catch {
            try? await perform { connection in
                if !connection.libpq.isBroken { _ = try connection.libpq.exec("ROLLBACK") }
            }
            throw error
        }
        try await perform { connection in
            if connection.libpq.isInFailedTransaction {
                _ = try connection.libpq.exec("ROLLBACK")
                throw PostgresError.server(
                    sqlState: .inFailedSQLTransaction, message: "a statement failed in the transaction, which was rolled back",
                    constraint: nil)
            }
            _ = try connection.libpq.exec("COMMIT")
        }
        return result
    }

    /// Whether the pool may lend this connection again: alive and outside any transaction.
    var isReusable: Bool { health.withLock { !$0.broken && $0.idle } }

    /// Whether a connection that sat idle in the pool is still alive (see `survivedIdling`).
    func survivedIdling() async -> Bool {
        (try? await perform { $0.libpq.survivedIdling() }) ?? false
    }

    /// What a loan came to: the borrower's result, or nothing because the idle connection had died.
    enum Loan<R: Sendable>: Sendable {
        case done(R)
        case brokenWhileIdle
    }

    /// Runs `body` with this connection, on the connection's queue, after checking (in the same
    /// hop) that a connection taken from the idle list survived its idling.
    func lend<R: Sendable>(checkingIdleHealth: Bool, _ body: (PostgresConnection) async throws -> R) async throws
        -> Loan<R>
    {
        try await withTaskExecutorPreference(executor) {
            if checkingIdleHealth, !(await survivedIdling()) { return .brokenWhileIdle }
            return .done(try await body(self))
        }
    }

    /// Closes the session on its queue, after any operation still queued.
    func close() {
        health.withLock { $0.broken = true }
        queue.async { self.libpq.finish() }
    }

    /// Runs blocking libpq work on the connection's queue, off the cooperative thread pool: in
    /// place when the caller already runs there (a borrower's closure), else by a hop there and back.
    private func perform<R: Sendable>(
        _ work: @escaping @Sendable (PostgresConnection) throws -> R
    ) async throws -> R {
        if executor.isCurrent { return try performHere(work) }
        return try await withCheckedThrowingContinuation { continuation in
            queue.async { continuation.resume(with: Result { try self.performHere(work) }) }
        }
    }

    /// On `queue` only.
    private func performHere<R>(_ work: (PostgresConnection) throws -> R) throws -> R {
        defer {
            let state = Health(broken: libpq.isBroken, idle: libpq.isIdle)
            health.withLock { $0 = state }
        }
        return try work(self)
    }

    /// On `queue` only.
    private func execute(_ query: PostgresQuery, retryingStale: Bool = true) throws -> PostgresRows {
        if query.isScript { return try libpq.exec(query.sql) }
        let key = StatementCache.Key(sql: query.sql, types: query.binds.map(\.type))
        let name: String
        if let cached = statements.lookup(key) {
            name = cached
        } else {
            name = statements.nextName()
            try libpq.prepare(name, query.sql, types: key.types)
            if let evicted = statements.insert(key, name: name) { deallocate(evicted) }
        }
        do {
            return try libpq.execPrepared(name, query.binds)
        } catch let error as PostgresError where error.sqlState == .invalidSQLStatementName || error.sqlState == .featureNotSupported {
            // The statement is gone (DEALLOCATE ALL, DISCARD ALL) or its plan cannot survive a
            // schema change ("cached plan must not change result type"): prepare it afresh.
            if let stale = statements.remove(key) { deallocate(stale) }
            // Outside a transaction block the failed statement changed nothing, so run it again;
            // inside one, the transaction is aborted and the caller must replay it.
            guard retryingStale, libpq.isIdle else { throw error }
            return try execute(query, retryingStale: false)
        }
    }

    /// On `queue` only. Fails inside an aborted transaction: the statement then lives on, unused,
    /// until the session ends (names are never reused, so it cannot be confused with another).
    private func deallocate(_ name: String) {
        _ = try? libpq.exec("DEALLOCATE " + PostgresQuery.quoteIdentifier(name))
    }
}

/// The task executor of one connection: jobs run on the connection's serial queue.
///
/// Sendable: it holds only the queue (itself thread-safe) and an immutable identity.
final class ConnectionExecutor: TaskExecutor {
    /// Marks each connection's queue with its id, so code can tell whether it runs there.
    static let queueKey = DispatchSpecificKey<Int>()
    private let queue: DispatchQueue
    private let id: Int?

    init(queue: DispatchQueue) {
        self.queue = queue
        id = queue.getSpecific(key: Self.queueKey)
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        queue.async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }

    /// True when the calling code runs on this connection's queue.
    var isCurrent: Bool { id != nil && DispatchQueue.getSpecific(key: Self.queueKey) == id }
}

/// Names of the statements one connection has prepared, least recently used evicted first.
struct StatementCache {
    struct Key: Hashable {
        let sql: String
        /// Part of the key: a statement is prepared for fixed parameter types.
        let types: [PostgresDataType]
    }

    let capacity: Int
    private var entries: [Key: (name: String, lastUse: UInt64)] = [:]
    private var uses: UInt64 = 0
    private var prepared = 0

    init(capacity: Int) { self.capacity = capacity }

    var count: Int { entries.count }

    mutating func lookup(_ key: Key) -> String? {
        guard let entry = entries[key] else { return nil }
        uses += 1
        entries[key] = (entry.name, uses)
        return entry.name
    }

    mutating func nextName() -> String {
        prepared += 1
        return "s\(prepared)"
    }

    /// Records a prepared statement; returns the name of the one evicted to make room, if any.
    mutating func insert(_ key: Key, name: String) -> String? {
        uses += 1
        entries[key] = (name, uses)
        guard entries.count > capacity, let oldest = entries.min(by: { $0.value.lastUse < $1.value.lastUse })
        else { return nil }
        entries[oldest.key] = nil
        return oldest.value.name
    }

    mutating func remove(_ key: Key) -> String? { entries.removeValue(forKey: key)?.name }
}

/// The pool's instruments in the shared registry.
struct PostgresMetrics: Sendable {
    let connectionsOpen: Gauge
    let connectFailures: Counter
    let acquireTimeouts: Counter
    let queryDuration: Histogram

    init(registry: MetricsRegistry = .shared) {
        connectionsOpen = registry.gauge("postgres_connections_open", help: "PostgreSQL connections open")
        connectFailures = registry.counter(
            "postgres_connect_failures_total", help: "Failed attempts to open a PostgreSQL connection")
        acquireTimeouts = registry.counter(
            "postgres_acquire_timeouts_total", help: "Callers that waited too long for a pooled connection")
        queryDuration = registry.histogram(
            "postgres_query_duration_seconds", help: "Time PostgreSQL statements take, round trip included")
    }
}
