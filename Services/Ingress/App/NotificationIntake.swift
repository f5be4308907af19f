import Events
import Pipeline
import Postgres
import ServiceRuntime
import Storage

/// Makes an inbound event durable, then publishes it: the ingress's one write path.
///
/// The caller may acknowledge the sender as soon as `accept` returns: the row and its outbox mark
/// are committed. Publishing happens after the commit; if it fails or the process dies first, the
/// outbox relay publishes the row later.
public struct NotificationIntake: Sendable {
    public let store: EventIntakeStore
    public let publisher: any OutboxPublishing
    private let accepted = MetricsRegistry.shared.counter(
        "subs_notifications_accepted_total", help: "Notifications stored (new)")
    private let duplicates = MetricsRegistry.shared.counter(
        "subs_notifications_duplicate_total", help: "Notifications received again (already stored)")

    private let batches: GroupCommit<Submission, StoredEvent>

    private struct Submission: Sendable {
        var event: NewNotificationEvent
        var awaitPublish: Bool
    }

    public init(store: EventIntakeStore, publisher: any OutboxPublishing, maxBatchSize: Int = 64, maxConcurrentBatches: Int = 4) {
        self.store = store
        self.publisher = publisher
        batches = GroupCommit(maxBatchSize: maxBatchSize, maxConcurrentBatches: maxConcurrentBatches) { submissions in
            let stored = try await store.insertNotifications(submissions.map(\.event))
            // One publishing task per committed batch, not per notification: its acknowledgements
            // then clear the batch's outbox rows in one statement too. It runs beside the next
            // batch, never in front of it.
            let detached = zip(submissions, stored).compactMap { $0.awaitPublish ? nil : $1.outbox }
            if !detached.isEmpty { Task { await publisher.publish(detached) } }
            return stored
        }
    }

    /// Stores the event (a duplicate UUID is a success that writes nothing) and starts publishing it.
    /// Concurrent calls share commits; each returns only once its own row is durable.
    /// `awaitPublish` also waits until the broker acknowledged the message (or refused it).
    @discardableResult
    public func accept(_ event: NewNotificationEvent, awaitPublish: Bool = false) async throws -> StoredEvent {
        let stored = try await batches.submit(Submission(event: event, awaitPublish: awaitPublish))
        guard let outbox = stored.outbox else {
            duplicates.increment()
            return stored
        }
        accepted.increment()
        if awaitPublish { await publisher.publish([outbox]) }
        return stored
    }
}
