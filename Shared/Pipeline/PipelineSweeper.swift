import Foundation
import ServiceRuntime
import Storage

/// Keeps every stored event moving: re-queues events that need a worker (due retries, expired
/// leases, events stuck in RECEIVED) and publishes due outbox rows. Safe to run in every instance.
public final class PipelineSweeper: Service {
    public let name = "pipeline-sweeper"
    private let publisher: EventPublisher
    private let interval: Duration
    private let stuckAfter: Duration
    private let logger: Logger
    private let stop = ShutdownTrigger()
    private let ensureTopic: (@Sendable () async -> Void)?
    private let requeued = MetricsRegistry.shared.counter(
        "subs_events_requeued_total", help: "Events re-published by the sweeper (retries, expired leases, stuck)")

    /// `ensureTopic` runs after a pass whose publishing failed: a broker that lost its storage
    /// (Tansu in memory) or a deleted topic must get the topic back with its partition count
    /// before anything can be published again.
    public init(
        publisher: EventPublisher, interval: Duration, stuckAfter: Duration, logger: Logger,
        ensureTopic: (@Sendable () async -> Void)? = nil
    ) {
        self.ensureTopic = ensureTopic
        self.publisher = publisher
        self.interval = interval
        self.stuckAfter = stuckAfter
        self.logger = logger
    }

    public func run() async throws {
        while !stop.isFired {
            await sweepOnce()
            _ = await stop.wait(timeout: interval)
        }
    }

    public func shutdown() async { stop.fire() }

    /// One pass; returns the number of outbox rows published.
    @discardableResult
    public func sweepOnce() async -> Int {
        do {
            let outbox = publisher.outbox
            let queued = try await outbox.requeueStuck(stuckAfter: stuckAfter, republishGrace: max(interval * 5, .seconds(5)))
            requeued.increment(by: queued)
            var published = 0
            while true {
                let due = try await outbox.claimDue(limit: 500, retryAfter: .seconds(5))
                if due.isEmpty { break }
                let acknowledged = await publisher.publish(due)
                published += acknowledged
                if acknowledged < due.count {
                    await ensureTopic?()
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
