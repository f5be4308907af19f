import Foundation
import Kafka
import Postgres
import ServiceRuntime
import Storage
import Synchronization

/// Publishes committed outbound events to `OUTBOUND_EVENT_TOPIC` (key: the user, value: the
/// event) and marks them published once the broker acknowledged them.
///
/// One relay publishes at a time (`OutboundEventStore.relay` holds an advisory lock), so a user's
/// events reach their partition in sequence order whatever the number of workers; the others
/// wake, find the lock taken and wait for the next wake-up. A writer's commit wakes the relays
/// (`nudge`: in-process at once, the other workers through NOTIFY), a pass gathers the commits of
/// the next `gathering`, and a sweep every `interval` catches a lost wake-up. With the broker away nothing is marked: the events wait in the table.
/// Delivery is at least once: a crash between the acknowledgement and the mark publishes again
/// (consumers deduplicate by `id`, or by `userId` and `sequence`).
///
/// Without a producer (`OUTBOUND_EVENTS_ENABLED=false`) nothing is published: the worker's
/// fulfillment writes no events then, but the rarer writers (credit jobs, operators' grants and
/// adjustments, the clock) still record theirs in their transactions (they stay visible in the
/// support case); this relay marks those handled, so they never form a backlog or fire its alert.
public final class OutboundRelay: Service {
    public let name = "outbound-relay"
    private let store: OutboundEventStore
    private let producer: KafkaProducer?
    private let topic: String
    private let interval: Duration
    private let logger: Logger
    private let failures: ThrottledLog
    private let stop = ShutdownTrigger()
    /// Fired by a wake-up; replaced before each pass, so a wake-up during a pass starts another.
    private let wake = Mutex(ShutdownTrigger())
    private let listening = Mutex<PostgresListener?>(nil)
    private let announcements: GroupCommit<Int, Void>
    /// Whether this relay's last pass held the lock: then its own wake-up is enough, and a commit
    /// here sends no NOTIFY (a transaction of its own).
    private let holding = Atomic(false)
    /// When the backlog gauges were last sampled (a count per pass cost a statement per wake-up).
    private let sampled = Mutex<ContinuousClock.Instant?>(nil)
    static let batch = 500
    /// How long a wake-up waits for more commits before its pass, and a NOTIFY for more nudges.
    static let gathering = Duration.milliseconds(25)

    private let published = MetricsRegistry.shared.counter(
        "subs_outbound_events_published_total", help: "Outbound events acknowledged by the broker on OUTBOUND_EVENT_TOPIC")
    private let discarded = MetricsRegistry.shared.counter(
        "subs_outbound_events_discarded_total", help: "Outbound events marked handled unpublished (OUTBOUND_EVENTS_ENABLED=false)")
    private let failed = MetricsRegistry.shared.counter(
        "subs_outbound_events_publish_failures_total", help: "Outbound events the broker did not acknowledge (retried)")
    private let unpublished = MetricsRegistry.shared.gauge(
        "subs_outbound_events_unpublished", help: "Committed outbound events not acknowledged by the broker yet")
    private let oldest = MetricsRegistry.shared.gauge(
        "subs_outbound_events_oldest_unpublished_seconds", help: "Age of the oldest unpublished outbound event (0: none)")

    public init(store: OutboundEventStore, producer: KafkaProducer?, topic: String, interval: Duration, logger: Logger) {
        self.store = store
        self.producer = producer
        self.topic = topic
        self.interval = interval
        self.logger = logger
        failures = ThrottledLog(logger: logger)
        // Wake-ups of batches committed meanwhile share one NOTIFY (a commit of its own each).
        announcements = GroupCommit(maxBatchSize: 1024, maxConcurrentBatches: 1) { nudges in
            try await store.announce()
            // Held a moment, so the nudges meanwhile share the next NOTIFY (one at a time).
            try? await Task.sleep(for: Self.gathering)
            return nudges.map { _ in () }
        }
    }

    /// After a commit that wrote events: publish them now, here and in the other workers.
    public func nudge() {
        wake.withLock { $0 }.fire()
        guard !holding.load(ordering: .relaxed) else { return }
        let (announcements, logger) = (announcements, logger)
        Task {
            do { try await announcements.submit(0) } catch {
                logger.debug("could not wake the other relays", ["error": .string("\(error)")])
            }
        }
    }

    public func run() async throws {
        let listener = Task { await listen() }
        defer { listener.cancel() }
        while !stop.isFired {
            let next = ShutdownTrigger()
            wake.withLock { $0 = next }
            await relayOnce()
            _ = await next.wait(timeout: interval)
            // The commits of the next moments share a pass: a pass per commit cost PostgreSQL a
            // transaction each, as much as the commit that wrote the events.
            _ = await stop.wait(timeout: Self.gathering)
        }
    }

    public func shutdown() async {
        stop.fire()
        wake.withLock { $0 }.fire()
        listening.withLock { $0 }?.close()
    }

    /// Wakes the loop on every NOTIFY of a writer, listening again after a lost connection.
    private func listen() async {
        while !stop.isFired, !Task.isCancelled {
            do {
                let listener = try await store.pool.listen(OutboundEventStore.channel)
                listening.withLock { $0 = listener }
                for await _ in listener { wake.withLock { $0 }.fire() }
            } catch {
                failures.record("outbound relay cannot listen", reason: "listen", ["error": .string("\(error)")])
            }
            _ = await stop.wait(timeout: .seconds(1))
        }
    }

    /// Publishes until nothing is left, the broker fails or another relay holds the lock; returns
    /// how many were acknowledged.
    @discardableResult
    public func relayOnce() async -> Int {
        var total = 0
        do {
            while !stop.isFired {
                let sent = try await store.relay(limit: Self.batch) { [self] events in await publish(events) }
                holding.store(sent != nil, ordering: .relaxed)
                // Another worker relays: the gauges below are still this worker's view of the backlog.
                guard let sent else { break }
                total += sent
                if sent < Self.batch { break }
            }
            let now = ContinuousClock.now
            let due = sampled.withLock { last in
                guard last.map({ now - $0 >= .seconds(5) }) ?? true else { return false }
                last = now
                return true
            }
            if due {
                let backlog = try await store.backlog()
                unpublished.set(Double(backlog.count))
                oldest.set(backlog.oldestSeconds)
            }
        } catch {
            holding.store(false, ordering: .relaxed)
            failures.record("outbound relay pass failed", reason: "relay", ["error": .string("\(error)")])
        }
        return total
    }

    /// Sends each user's events in order, all at once (the idempotent producer keeps their order
    /// on the partition), and the users' in parallel; a user's events count as published up to the
    /// first one the broker did not acknowledge, so a failure cannot put a later one ahead.
    private func publish(_ events: [PublishableOutboundEvent]) async -> [Int64] {
        guard let producer else {
            discarded.increment(by: events.count)
            return events.map(\.seq)
        }
        var byUser: [String: [PublishableOutboundEvent]] = [:]
        for event in events { byUser[event.userID, default: []].append(event) }
        let acknowledged = await withTaskGroup(of: [Int64].self) { group in
            for (user, events) in byUser {
                group.addTask { [producer, topic, failures] in
                    let sent = await producer.send(topic: topic, key: Array(user.utf8), inOrder: events.map { Array($0.value.utf8) })
                    if let error = sent.error {
                        failures.record(
                            "outbound event not acknowledged, left for the next pass", reason: "not_acknowledged",
                            ["error": .string("\(error)")])
                    }
                    return events.prefix(sent.acknowledged).map(\.seq)
                }
            }
            var all: [Int64] = []
            for await done in group { all += done }
            return all
        }
        published.increment(by: acknowledged.count)
        failed.increment(by: events.count - acknowledged.count)
        return acknowledged
    }
}
