import Events
import Foundation
import Postgres
import ServiceRuntime

/// The outbox (`event_outbox`): messages committed with their events, published by the caller or
/// the relay and deleted once the broker acknowledged them; and the sweep that queues again the
/// events a worker should have taken by now.
extension EventStore {
    /// Queues the message of a new event inside the transaction that stores it, due after `delay`.
    func enqueue(
        kind: EventKind, eventID: Int64, routingKey: String, traceID: String?, delay: Duration,
        on connection: PostgresConnection
    ) async throws -> OutboxEntry {
        let rows = try await connection.query(
            """
            INSERT INTO event_outbox (event_kind, event_id, topic, routing_key, trace_id, next_attempt_at)
            VALUES (\(kind.rawValue), \(eventID), \(topic), \(routingKey), \(traceID),
                    now() + make_interval(secs => \(delay.inSeconds)))
            RETURNING id
            """)
        return OutboxEntry(
            id: try rows.single().decode("id", as: Int64.self),
            envelope: EventEnvelope(kind: kind, eventID: eventID, traceID: traceID), topic: topic,
            routingKey: routingKey)
    }

    /// Deletes outbox rows whose messages the broker acknowledged.
    ///
    /// Commits asynchronously (no WAL flush of its own): a delete lost in a server crash only
    /// publishes those events again, which the workers' claims make harmless, and these flushes
    /// queued behind the ingress's and the workers' own commits.
    public func markPublished(_ ids: [Int64]) async throws {
        guard !ids.isEmpty else { return }
        try await pool.query(
            """
            DELETE FROM event_outbox USING (SELECT set_config('synchronous_commit', 'off', true)) AS asynchronous_commit
             WHERE id = ANY(\(PostgresArray(ids))::bigint[])
            """)
    }

    /// Takes due outbox rows for publishing, safe with many relays: each row is taken by one relay
    /// (SKIP LOCKED) and pushed back by `retryAfter`, so a relay that dies mid-publish only delays it.
    public func claimDue(limit: Int, retryAfter: Duration) async throws -> [OutboxEntry] {
        let rows = try await pool.query(
            """
            WITH due AS (
                SELECT id FROM event_outbox WHERE next_attempt_at <= now()
                ORDER BY next_attempt_at LIMIT \(limit) FOR UPDATE SKIP LOCKED
            )
            UPDATE event_outbox o
               SET attempts = o.attempts + 1, next_attempt_at = now() + make_interval(secs => \(retryAfter.inSeconds))
              FROM due WHERE o.id = due.id
            RETURNING o.id, o.event_kind, o.event_id, o.topic, o.routing_key, o.trace_id
            """)
        return try rows.map { row in
            let traceID = try row.decode("trace_id", as: String?.self)
            return OutboxEntry(
                id: try row.decode("id"),
                envelope: EventEnvelope(
                    kind: EventKind(rawValue: try row.decode("event_kind")), eventID: try row.decode("event_id"),
                    traceID: traceID),
                topic: try row.decode("topic"), routingKey: try row.decode("routing_key"))
        }
    }

    /// Queues again the events that need a worker and have no message on the way: retries that are
    /// due, leases that ran out (a crashed worker), and events still RECEIVED after `stuckAfter` (a
    /// broker that lost the message). Returns how many were queued; safe with several sweepers.
    ///
    /// Each of the three is read through its own partial index, oldest first, then the oldest
    /// `limit` of them are locked: one scan over the three conditions ORed, ordered by id, read the
    /// primary key of every month (8 s a pass on 10,000,000 events) while nothing was due.
    public func requeueStuck(stuckAfter: Duration, republishGrace: Duration, limit: Int = 500) async throws -> Int {
        try await pool.query(
            """
            WITH candidate AS (
                (SELECT id, received_at FROM inbound_event
                  WHERE process_status = \(sql: EventStatus.retryWait.literal) AND next_retry_at <= now()
                    AND (republished_at IS NULL OR republished_at < now() - make_interval(secs => \(republishGrace.inSeconds)))
                  ORDER BY next_retry_at LIMIT \(limit))
                UNION ALL
                (SELECT id, received_at FROM inbound_event
                  WHERE process_status = \(sql: EventStatus.processing.literal) AND lease_expires_at < now()
                    AND (republished_at IS NULL OR republished_at < now() - make_interval(secs => \(republishGrace.inSeconds)))
                  ORDER BY lease_expires_at LIMIT \(limit))
                UNION ALL
                (SELECT id, received_at FROM inbound_event
                  WHERE process_status = \(sql: EventStatus.received.literal)
                    AND (republished_at IS NULL OR republished_at < now() - make_interval(secs => \(republishGrace.inSeconds)))
                    AND received_at < now() - make_interval(secs => \(stuckAfter.inSeconds))
                  ORDER BY received_at LIMIT \(limit))
            ), due AS (
                -- Locked rows are checked again as they are now (another sweeper or a worker may
                -- have moved them meanwhile).
                SELECT e.id, e.received_at FROM candidate c JOIN inbound_event e ON e.id = c.id AND e.received_at = c.received_at
                 WHERE ((e.process_status = \(sql: EventStatus.retryWait.literal) AND e.next_retry_at <= now())
                     OR (e.process_status = \(sql: EventStatus.processing.literal) AND e.lease_expires_at < now())
                     OR (e.process_status = \(sql: EventStatus.received.literal)
                         AND e.received_at < now() - make_interval(secs => \(stuckAfter.inSeconds))))
                   AND (e.republished_at IS NULL OR e.republished_at < now() - make_interval(secs => \(republishGrace.inSeconds)))
                 ORDER BY e.id LIMIT \(limit) FOR UPDATE OF e SKIP LOCKED
            ), marked AS (
                UPDATE inbound_event e SET republished_at = now() FROM due WHERE e.id = due.id AND e.received_at = due.received_at
                RETURNING e.kind, e.id, e.routing_key, e.trace_id
            )
            INSERT INTO event_outbox (event_kind, event_id, topic, routing_key, trace_id)
            SELECT m.kind, m.id, \(topic), m.routing_key, m.trace_id FROM marked m
             WHERE NOT EXISTS (SELECT 1 FROM event_outbox o WHERE o.event_kind = m.kind AND o.event_id = m.id)
            """
        ).affectedRows
    }
}
