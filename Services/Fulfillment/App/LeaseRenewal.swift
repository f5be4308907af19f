import Postgres
import ServiceRuntime
import Storage
import Synchronization

/// The worker's lease heartbeat: every third of the lease, one statement extends the leases of
/// all the events it is working on and one those of its tasks.
///
/// A lease then only has to outlast a heartbeat, not the longest piece of work (an App Store
/// Server API call, a slow batch under load), so it can be short and a dead worker's events come
/// back within seconds. An event or task is held from its claim until its outcome is recorded.
/// Sendable: the held ids are behind a mutex.
final class LeaseRenewal: Service, Sendable {
    let name = "lease-renewal"
    let owner: String
    let lease: Duration
    private let events: EventStore
    private let tasks: TaskStore
    private let logger: Logger
    /// Holders per id: two messages of one event may be handled at once (one of them claims nothing).
    private let held = Mutex<(events: [Int64: Int], tasks: [Int64: Int])>(([:], [:]))
    private let stop = ShutdownTrigger()
    private let renewals = MetricsRegistry.shared.counter(
        "subs_fulfillment_lease_renewals_total", help: "Leases of events and tasks extended while they were worked on")
    private let failures = MetricsRegistry.shared.counter(
        "subs_fulfillment_lease_renewal_failures_total", help: "Lease heartbeats that could not reach PostgreSQL")

    init(events: EventStore, owner: String, lease: Duration, logger: Logger) {
        self.events = events
        tasks = TaskStore(pool: events.pool)
        self.owner = owner
        self.lease = lease
        self.logger = logger
    }

    /// Keeps renewing the event's lease until the returned body ends.
    func holdingEvent<T>(_ id: Int64, _ body: () async throws -> T) async rethrows -> T {
        held.withLock { $0.events[id, default: 0] += 1 }
        defer { held.withLock { Self.release(id, from: &$0.events) } }
        return try await body()
    }

    /// Keeps renewing the task's lease until the returned body ends.
    func holdingTask<T>(_ id: Int64, _ body: () async throws -> T) async rethrows -> T {
        held.withLock { $0.tasks[id, default: 0] += 1 }
        defer { held.withLock { Self.release(id, from: &$0.tasks) } }
        return try await body()
    }

    private static func release(_ id: Int64, from holders: inout [Int64: Int]) {
        if let count = holders[id], count > 1 { holders[id] = count - 1 } else { holders[id] = nil }
    }

    func run() async throws {
        while !(await stop.wait(timeout: lease / 3)) {
            await renewOnce()
        }
    }

    func shutdown() async { stop.fire() }

    /// One heartbeat; returns how many leases were extended.
    @discardableResult
    func renewOnce() async -> Int {
        let (eventIDs, taskIDs) = held.withLock { (Array($0.events.keys), Array($0.tasks.keys)) }
        do {
            let renewed =
                try await events.renew(eventIDs, owner: owner, lease: lease).count
                + tasks.renew(taskIDs, owner: owner, lease: lease).count
            renewals.increment(by: renewed)
            return renewed
        } catch {
            // The next heartbeat comes a third of a lease later; two missed ones let the lease run out.
            failures.increment()
            logger.warning("leases not renewed", ["error": .string("\(error)")])
            return 0
        }
    }
}
