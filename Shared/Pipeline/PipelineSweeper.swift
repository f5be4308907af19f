import Foundation
import ServiceRuntime
import Storage
import Synchronization

/// Keeps every stored event moving: re-queues events that need a worker (due retries, expired
/// leases, events stuck in RECEIVED) and publishes due outbox rows. Safe to run in every instance.
public final class PipelineSweeper: Service {
    public let name = "pipeline-sweeper"
    private let publisher: EventPublisher
    private let interval: Duration
    private let stuckAfter: Duration
    private let logger: Logger
    private let stop = ShutdownTrigger()
    private let ensureTopic: (@Sendable () async -> Bool)?
    /// Whether the event topic is known to exist: until it is, passes ensure it instead of publishing.
    private let topicReady: Atomic<Bool>
    /// Fired when the running pass ends, or by `shutdown()`: the loop never waits on a pass stuck
    /// on a broker that is gone.
    private let passEnded = Mutex<ShutdownTrigger?>(nil)
    private let requeued = MetricsRegistry.shared.counter(
        "subs_events_requeued_total", help: "Events re-published by the sweeper (retries, expired leases, stuck)")

    /// `ensureTopic` runs before publishing until it answers that the topic exists, when the
    /// process started without knowing (`topicReady` false: the broker did not answer at start-up),
    /// and after a pass whose publishing failed: a broker that lost its storage (Tansu in memory)
    /// or a deleted topic must get the topic back with its partition count before anything can be
    /// published again.
    public init(
        publisher: EventPublisher, interval: Duration, stuckAfter: Duration, logger: Logger,
        ensureTopic: (@Sendable () async -> Bool)? = nil, topicReady: Bool = true
    ) {
        self.ensureTopic = ensureTopic
        self.topicReady = Atomic(topicReady || ensureTopic == nil)
        self.publisher = publisher
        self.interval = interval
        self.stuckAfter = stuckAfter
        self.logger = logger
    }

    public func run() async throws {
        while !stop.isFired {
            let ended = ShutdownTrigger()
            passEnded.withLock { $0 = ended }
            Task {
                await sweepOnce()
                ended.fire()
            }
            if stop.isFired { ended.fire() }
            await ended.wait()
            _ = await stop.wait(timeout: interval)
        }
    }

    /// Ends `run()` at once; a pass still waiting on the broker is left to finish on its own
    /// (what it did not publish stays in the outbox).
    public func shutdown() async {
        stop.fire()
        passEnded.withLock { $0 }?.fire()
    }

    /// One pass; returns the number of outbox rows published.
    @discardableResult
    public func sweepOnce() async -> Int {
        do {
            let outbox = publisher.outbox
            let queued = try await outbox.requeueStuck(stuckAfter: stuckAfter, republishGrace: max(interval * 5, .seconds(5)))
            requeued.increment(by: queued)
            var published = 0
            if !topicReady.load(ordering: .relaxed), let ensureTopic {
                guard await ensureTopic() else { return 0 }
                topicReady.store(true, ordering: .relaxed)
                logger.info("event topic ready; publishing the outbox")
            }
            while true {
                let due = try await outbox.claimDue(limit: 500, retryAfter: .seconds(5))
                if due.isEmpty { break }
                let acknowledged = await publisher.publish(due)
                published += acknowledged
                if acknowledged < due.count {
                    _ = await ensureTopic?()
                    break
                }
                if due.count < 500 || stop.isFired { break }
            }
            if queued > 0 || published > 0 {
                logger.info(
                    "sweeper pass", ["events.requeued": .int(Int64(queued)), "outbox.published": .int(Int64(published))])
            }
            return published
        } catch {
            logger.warning("sweeper pass failed", ["error": .string("\(error)")])
            return 0
        }
    }
}
