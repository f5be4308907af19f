import Domain
import Foundation
import Postgres
import ServiceRuntime
import Storage

/// The clock job: a subscription's status also changes between facts (its period ends, its grace
/// period ends, Apple's retries end), and `next_change_at` says when. Every run advances the rows
/// whose moment came, in batches, each in one transaction with its status history and outbound
/// events; any number of workers run it (rows and chains are locked, taken ones skipped), and a row
/// advanced twice changes nothing more (its next change is then later than the run's `now`).
public struct SubscriptionClock: Sendable {
    let pool: PostgresPool
    let batchSize: Int
    private let bindings: ChainBindingStore

    /// `status_history.cause` of the clock's changes.
    public static let cause = "CLOCK"

    public init(pool: PostgresPool, batchSize: Int = 500) {
        self.pool = pool
        self.batchSize = batchSize
        bindings = ChainBindingStore(pool: pool, topic: nil)
    }

    /// Advances every row due at `now`; returns how many rows it advanced.
    @discardableResult
    public func advance(now: Date) async throws -> Int {
        var advanced = 0
        while true {
            let count = try await advanceBatch(now: now)
            advanced += count
            if count < batchSize { return advanced }
        }
    }

    /// One batch in one transaction; returns the rows advanced (fewer than the batch: none left
    /// that this runner may take now).
    func advanceBatch(now: Date) async throws -> Int {
        try await pool.transaction { db in
            let due = try await bindings.lockDueSubscriptions(now: now, limit: batchSize, on: db)
            guard !due.isEmpty else { return 0 }
            var states: [SubscriptionState] = []
            var history: [(key: String, previous: String, current: String)] = []
            var events: [OutboundEvent] = []
            for row in due {
                let advanced = row.state.advanced(to: now)
                states.append(advanced)
                guard advanced.status != row.state.status else { continue }
                history.append((advanced.historyKey, row.state.status.rawValue, advanced.status.rawValue))
                let entitlements = row.entitlements
                events += SubscriptionEvents.change(
                    userID: row.userID, from: row.state, to: advanced, entitlements: { _ in entitlements }, now: now)
            }
            try await bindings.storeAdvanced(states, on: db)
            try await OrderStore.appendSubscriptionHistory(history, cause: Self.cause, on: db)
            if !events.isEmpty { _ = try await OutboundEventStore(pool: pool).append(events, on: db) }
            return due.count
        }
    }

    /// Seconds since the oldest change that fell due and is still waiting (0: none).
    public func lag(now: Date) async throws -> Double {
        guard let oldest = try await bindings.oldestDueChange(now: now) else { return 0 }
        return max(0, now.timeIntervalSince(oldest))
    }
}

/// Runs the clock job every `SUBSCRIPTION_CLOCK_INTERVAL_MS` on its own (a slow call to Apple in
/// the scheduler never holds it back), and exports how far behind it is.
final class SubscriptionClockService: Service {
    let name = "subscription-clock"
    private let job: SubscriptionClock
    private let interval: Duration?
    private let clock: any WallClock
    private let logger: Logger
    private let stop = ShutdownTrigger()
    private let advanced = MetricsRegistry.shared.counter(
        "subs_subscription_clock_advanced_total", help: "Subscription rows the clock job advanced at their moment")
    private let failures = MetricsRegistry.shared.counter(
        "subs_subscription_clock_failures_total", help: "Clock job passes that failed (retried at the next pass)")
    private let lag = MetricsRegistry.shared.gauge(
        "subs_subscription_clock_lag_seconds",
        help: "Age of the oldest subscription change that fell due and is not advanced yet, after this worker's pass (0: none)")

    init(pool: PostgresPool, interval: Duration?, batchSize: Int, clock: any WallClock, logger: Logger) {
        job = SubscriptionClock(pool: pool, batchSize: batchSize)
        self.interval = interval
        self.clock = clock
        self.logger = logger
    }

    func run() async throws {
        guard let interval else { return await stop.wait() }
        while !stop.isFired {
            do {
                let count = try await job.advance(now: clock.now())
                advanced.increment(by: count)
                lag.set(try await job.lag(now: clock.now()))
            } catch {
                failures.increment()
                logger.warning("subscription clock pass failed", ["error": .string("\(error)")])
            }
            _ = await stop.wait(timeout: interval)
        }
    }

    func shutdown() async { stop.fire() }
}
