import Events
import Pipeline
import Postgres
import ServiceRuntime
import Storage

/// Wakes the ingress requests waiting for an event's result (`EventStore.announceCompleted`)
/// once the event's transaction committed.
///
/// Notifications sent at the same moment share one statement: PostgreSQL serialises the commits
/// of transactions that notify, so one commit per event would cap the worker pool. A lost
/// notification only delays an answer (the ingress also re-reads when its wait ends).
struct FulfillmentNotifier: Sendable {
    private let batches: GroupCommit<ClaimedEvent, Void>
    private let logger: Logger

    init(leases: EventStore, logger: Logger) {
        self.logger = logger
        batches = GroupCommit(maxBatchSize: 256, maxConcurrentBatches: 1) { events in
            try await leases.announceCompleted(events.map { ($0.kind, $0.id) })
            return events.map { _ in () }
        }
    }

    /// Sends in the background; the caller never waits for the waiters.
    ///
    /// Only submissions have waiters (the ingress's transaction-upload routes): nobody awaits a
    /// notification's result, and a NOTIFY per notification cost each event a commit of its own.
    func notify(_ event: ClaimedEvent) {
        guard event.kind == .submission else { return }
        let (batches, logger) = (batches, logger)
        Task {
            do {
                try await batches.submit(event)
            } catch {
                logger.warning("could not notify the ingress", ["event.id": .int(event.id), "error": .string("\(error)")])
            }
        }
    }
}
