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
    public let store: EventStore
    public let publisher: any OutboxPublishing
    private let accepted = MetricsRegistry.shared.counter(
        "subs_notifications_accepted_total", help: "Notifications stored (new)")
    private let duplicates = MetricsRegistry.shared.counter(
        "subs_notifications_duplicate_total", help: "Notifications received again (already stored)")

    private let conflicts = MetricsRegistry.shared.counter(
        "subs_notification_uuid_conflicts_total",
        help: "Notifications whose UUID was stored before with other signed content (the first was kept)")

    /// One result per notification: a row that fails alone must not fail the others of its batch.
    private let batches: GroupCommit<Submission, Result<StoredEvent, any Error>>

    private struct Submission: Sendable {
        var event: NewNotificationEvent
        var awaitPublish: Bool
    }

    public init(store: EventStore, publisher: any OutboxPublishing, maxBatchSize: Int = 64, maxConcurrentBatches: Int = 4) {
        self.store = store
        self.publisher = publisher
        batches = GroupCommit(maxBatchSize: maxBatchSize, maxConcurrentBatches: maxConcurrentBatches) { submissions in
            let stored = try await Self.insert(submissions.map(\.event), into: store)
            // One publishing task per committed batch, not per notification: its acknowledgements
            // then clear the batch's outbox rows in one statement too. It runs beside the next
            // batch, never in front of it.
            let detached = zip(submissions, stored).compactMap { $0.awaitPublish ? nil : try? $1.get().outbox }
            if !detached.isEmpty { Task { await publisher.publish(detached) } }
            return stored
        }
    }

    /// The batch in one statement; when the database refuses it for what a row holds (not for
    /// being unreachable), each row again on its own, so only the offending one fails.
    private static func insert(_ events: [NewNotificationEvent], into store: EventStore) async throws
        -> [Result<StoredEvent, any Error>]
    {
        do {
            return try await store.insertNotifications(events).map { .success($0) }
        } catch let error as PostgresError where events.count > 1 && error.sqlState != nil && !error.isRetryable {
            var results: [Result<StoredEvent, any Error>] = []
            for event in events {
                do {
                    results.append(.success(try await store.insertNotifications([event])[0]))
                } catch {
                    results.append(.failure(error))
                }
            }
            return results
        }
    }

    /// Stores the event (a duplicate UUID is a success that writes nothing) and starts publishing it.
    /// Concurrent calls share commits; each returns only once its own row is durable.
    /// `awaitPublish` also waits until the broker acknowledged the message (or refused it).
    @discardableResult
    public func accept(_ event: NewNotificationEvent, awaitPublish: Bool = false) async throws -> StoredEvent {
        // A value the database cannot hold would fail the whole shared commit: refused here.
        if let field = event.unstorableField { throw UnstorableNotification(field: field) }
        let stored = try await batches.submit(Submission(event: event, awaitPublish: awaitPublish)).get()
        guard let outbox = stored.outbox else {
            duplicates.increment()
            if stored.conflicting { conflicts.increment() }
            return stored
        }
        accepted.increment()
        if awaitPublish { await publisher.publish([outbox]) }
        return stored
    }
}

/// A notification with a field PostgreSQL cannot store (a NUL character): the sender's mistake.
public struct UnstorableNotification: Error, Sendable {
    /// The offending field's name (never its value).
    public let field: String
}
