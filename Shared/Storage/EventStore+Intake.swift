import Events
import Foundation
import Postgres
import ServiceRuntime

/// Intake of inbound events: a notification or a client's submission stored in `inbound_event`
/// with its outbox row, in one transaction, before the sender is answered. Every insert writes the
/// key row and the event row in one statement, and a key already there writes neither.
extension EventStore {
    /// The columns of a notification row, in the order of every insert below.
    private static let notificationColumns: StaticString = """
        id, received_at, kind, notification_uuid, notification_type, subtype, environment, signed_date, transaction_id,
        original_transaction_id, routing_key, signed_payload, payload_key_id, trace_id, payload_hash, request_body
        """

    /// Stores a notification and its outbox row in one transaction. A duplicate UUID writes nothing.
    ///
    /// The outbox row becomes due only after `publishGrace`, leaving the caller time to publish
    /// it directly; the relay takes over if the caller crashes or the broker is down.
    public func insertNotification(_ event: NewNotificationEvent, publishGrace: Duration = .seconds(10))
        async throws -> StoredEvent
    {
        try await pool.transaction { connection in
            try await insertNotification(event, publishGrace: publishGrace, on: connection)
        }
    }

    /// The same, inside a caller's transaction (the ingress commits several notifications at once).
    public func insertNotification(
        _ event: NewNotificationEvent, publishGrace: Duration = .seconds(10), on connection: PostgresConnection
    ) async throws -> StoredEvent {
        let inserted = try await connection.query(
            """
            WITH key AS (
                INSERT INTO inbound_event_key (received_at, notification_uuid, environment, transaction_id, original_transaction_id)
                VALUES (now(), \(event.notificationUUID), \(event.environment), \(event.transactionID), \(event.originalTransactionID))
                ON CONFLICT (notification_uuid) DO NOTHING
                RETURNING id, received_at
            )
            INSERT INTO inbound_event (\(sql: Self.notificationColumns))
            SELECT id, received_at, \(EventKind.notification.rawValue), \(event.notificationUUID), \(event.notificationType),
                   \(event.subtype), \(event.environment), \(event.signedDate), \(event.transactionID),
                   \(event.originalTransactionID), \(event.routingKey), \(event.sealedPayload), \(event.payloadKeyID),
                   \(event.traceID), \(event.payloadHash), \(event.sealedRequestBody)
              FROM key
            RETURNING id
            """)
        guard let row = inserted.first else {
            let stored = try await Self.stored([event.notificationUUID]) { try await connection.query($0) }
            guard let first = stored[event.notificationUUID] else {
                // The conflicting row went between the two statements (retention released its key):
                // a retry stores the notification afresh.
                throw PostgresError.server(
                    sqlState: .serializationFailure, message: "notification \(event.notificationUUID) moved during intake", constraint: nil)
            }
            return try await duplicates([(event, first)]) { try await connection.query($0) }[0]
        }
        let id = try row.decode("id", as: Int64.self)
        let entry = try await enqueue(
            kind: .notification, eventID: id, routingKey: event.routingKey, traceID: event.traceID,
            delay: publishGrace, on: connection)
        return StoredEvent(eventID: id, isNew: true, outbox: entry)
    }

    /// Stores notifications with their outbox rows in ONE statement (one commit, one round trip:
    /// the ingress's group commit); returns one result per event, in order. A UUID already
    /// stored, or repeated within the batch after its first occurrence, writes nothing (isNew false).
    public func insertNotifications(_ events: [NewNotificationEvent], publishGrace: Duration = .seconds(10))
        async throws -> [StoredEvent]
    {
        guard !events.isEmpty else { return [] }
        let inserted = try await pool.query(
            """
            WITH input AS (
                SELECT * FROM unnest(
                    \(PostgresArray(events.map(\.notificationUUID)))::text[], \(PostgresArray(events.map(\.notificationType)))::text[],
                    \(PostgresArray(events.map(\.subtype)))::text[], \(PostgresArray(events.map(\.environment)))::text[],
                    \(PostgresArray(events.map(\.signedDate)))::timestamptz[], \(PostgresArray(events.map(\.transactionID)))::text[],
                    \(PostgresArray(events.map(\.originalTransactionID)))::text[], \(PostgresArray(events.map(\.routingKey)))::text[],
                    \(PostgresArray(events.map(\.sealedPayload)))::bytea[], \(PostgresArray(events.map(\.payloadKeyID)))::text[],
                    \(PostgresArray(events.map(\.traceID)))::text[], \(PostgresArray(events.map(\.payloadHash)))::text[],
                    \(PostgresArray(events.map(\.sealedRequestBody)))::bytea[]
                ) WITH ORDINALITY AS i(notification_uuid, notification_type, subtype, environment, signed_date,
                                       transaction_id, original_transaction_id, routing_key, signed_payload,
                                       payload_key_id, trace_id, payload_hash, request_body, position)
            ), key AS (
                INSERT INTO inbound_event_key (received_at, notification_uuid, environment, transaction_id, original_transaction_id)
                SELECT now(), notification_uuid, environment, transaction_id, original_transaction_id FROM input ORDER BY position
                ON CONFLICT (notification_uuid) DO NOTHING
                RETURNING id, received_at, notification_uuid
            ), inserted AS (
                -- A UUID repeated within the batch has one key row: its first occurrence is stored.
                INSERT INTO inbound_event (\(sql: Self.notificationColumns))
                SELECT k.id, k.received_at, \(EventKind.notification.rawValue), i.notification_uuid, i.notification_type,
                       i.subtype, i.environment, i.signed_date, i.transaction_id, i.original_transaction_id, i.routing_key,
                       i.signed_payload, i.payload_key_id, i.trace_id, i.payload_hash, i.request_body
                  FROM key k
                  JOIN (SELECT DISTINCT ON (notification_uuid) * FROM input ORDER BY notification_uuid, position) AS i
                       USING (notification_uuid)
                 ORDER BY k.id
                RETURNING id, notification_uuid, routing_key, trace_id
            ), queued AS (
                INSERT INTO event_outbox (event_kind, event_id, topic, routing_key, trace_id, next_attempt_at)
                SELECT \(EventKind.notification.rawValue), id, \(topic), routing_key, trace_id,
                       now() + make_interval(secs => \(publishGrace.inSeconds))
                  FROM inserted
                RETURNING id, event_id
            )
            SELECT i.notification_uuid, i.id AS event_id, q.id AS outbox_id
              FROM inserted i JOIN queued q ON q.event_id = i.id
            """)
        var new: [String: (eventID: Int64, outboxID: Int64)] = [:]
        for row in inserted {
            new[try row.decode("notification_uuid")] = (try row.decode("event_id"), try row.decode("outbox_id"))
        }
        // Duplicates: read after the insert committed, so rows another batch committed meanwhile show.
        let missing = Set(events.map(\.notificationUUID)).subtracting(new.keys)
        var existing: [String: Stored] = missing.isEmpty ? [:] : try await Self.stored(Array(missing)) { try await pool.query($0) }
        var results: [StoredEvent?] = []
        var repeated: [(position: Int, event: NewNotificationEvent, stored: Stored)] = []
        for (position, event) in events.enumerated() {
            if let stored = new.removeValue(forKey: event.notificationUUID) {
                existing[event.notificationUUID] = Stored(id: stored.eventID, hash: event.payloadHash)
                results.append(
                    StoredEvent(
                        eventID: stored.eventID, isNew: true,
                        outbox: OutboxEntry(
                            id: stored.outboxID,
                            envelope: EventEnvelope(kind: .notification, eventID: stored.eventID, traceID: event.traceID),
                            topic: topic, routingKey: event.routingKey)))
                continue
            }
            guard let stored = existing[event.notificationUUID] else {
                throw PostgresError.server(
                    sqlState: .internalError, message: "notification neither inserted nor found", constraint: nil)
            }
            results.append(nil)
            repeated.append((position, event, stored))
        }
        let answers = try await duplicates(repeated.map { ($0.event, $0.stored) }) { try await pool.query($0) }
        for (entry, answer) in zip(repeated, answers) { results[entry.position] = answer }
        return results.map { $0! }
    }

    /// A stored notification's id and content hash (nil for rows stored before hashes were kept).
    private struct Stored {
        var id: Int64
        var hash: String?
    }

    /// The stored notifications with these UUIDs, found through their keys (so in their own
    /// month's partition only). A key whose month was detached has no row: its id alone.
    private static func stored(_ uuids: [String], run: (PostgresQuery) async throws -> PostgresRows) async throws
        -> [String: Stored]
    {
        var stored: [String: Stored] = [:]
        for row in try await run(
            """
            SELECT k.notification_uuid, k.id, e.payload_hash
              FROM inbound_event_key k LEFT JOIN inbound_event e ON e.id = k.id AND e.received_at = k.received_at
             WHERE k.notification_uuid = ANY(\(PostgresArray(uuids))::text[])
            """)
        {
            stored[try row.decode("notification_uuid")] = Stored(id: try row.decode("id"), hash: try row.decode("payload_hash"))
        }
        return stored
    }

    /// The answers for notifications whose UUID was already stored; one whose signed content
    /// differs from the stored one is recorded in `notification_uuid_conflict` (once per content).
    private func duplicates(
        _ repeated: [(event: NewNotificationEvent, stored: Stored)],
        run: (PostgresQuery) async throws -> PostgresRows
    ) async throws -> [StoredEvent] {
        let differs = repeated.map { entry in
            guard let stored = entry.stored.hash, let received = entry.event.payloadHash else { return false }
            return stored != received
        }
        let conflicts = zip(repeated, differs).filter(\.1).map(\.0)
        if !conflicts.isEmpty {
            _ = try await run(
                """
                INSERT INTO notification_uuid_conflict
                    (notification_uuid, event_id, stored_payload_hash, received_payload_hash, notification_type, subtype,
                     signed_date, trace_id)
                SELECT * FROM unnest(
                    \(PostgresArray(conflicts.map(\.event.notificationUUID)))::text[],
                    \(PostgresArray(conflicts.map(\.stored.id)))::bigint[],
                    \(PostgresArray(conflicts.map(\.stored.hash)))::text[],
                    \(PostgresArray(conflicts.map(\.event.payloadHash)))::text[],
                    \(PostgresArray(conflicts.map(\.event.notificationType)))::text[],
                    \(PostgresArray(conflicts.map(\.event.subtype)))::text[],
                    \(PostgresArray(conflicts.map(\.event.signedDate)))::timestamptz[],
                    \(PostgresArray(conflicts.map(\.event.traceID)))::text[])
                ON CONFLICT (notification_uuid, received_payload_hash) DO NOTHING
                """)
        }
        return zip(repeated, differs).map { entry, differs in
            StoredEvent(eventID: entry.stored.id, isNew: false, outbox: nil, conflicting: differs)
        }
    }

    /// Stores a client's signed transaction (uploaded for an order, or observed) with its outbox
    /// row; the same JWS submitted again the same way is the same submission (isNew false).
    public func insertSubmission(_ submission: NewSubmission, publishGrace: Duration = .seconds(10)) async throws
        -> StoredEvent
    {
        try await pool.transaction { connection in
            let inserted = try await connection.query(
                """
                WITH key AS (
                    INSERT INTO inbound_event_key
                        (received_at, submission_kind, user_id, order_no, payload_hash, environment, transaction_id,
                         original_transaction_id)
                    VALUES (now(), \(submission.kind), \(submission.userID), \(submission.orderNo), \(submission.payloadHash),
                            \(submission.environment), \(submission.transactionID), \(submission.originalTransactionID))
                    ON CONFLICT (submission_kind, user_id, coalesce(order_no, ''), payload_hash) WHERE submission_kind IS NOT NULL
                    DO NOTHING
                    RETURNING id, received_at
                )
                INSERT INTO inbound_event
                    (id, received_at, kind, submission_kind, user_id, order_no, environment, transaction_id,
                     original_transaction_id, payload_hash, routing_key, signed_payload, payload_key_id, trace_id)
                SELECT id, received_at, \(EventKind.submission.rawValue), \(submission.kind), \(submission.userID),
                       \(submission.orderNo), \(submission.environment), \(submission.transactionID),
                       \(submission.originalTransactionID), \(submission.payloadHash), \(submission.originalTransactionID),
                       \(submission.sealedPayload), \(submission.payloadKeyID), \(submission.traceID)
                  FROM key
                RETURNING id
                """)
            guard let row = inserted.first else {
                let existing = try await connection.query(
                    """
                    SELECT id FROM inbound_event_key
                     WHERE submission_kind = \(submission.kind) AND user_id = \(submission.userID)
                       AND coalesce(order_no, '') = coalesce(\(submission.orderNo)::text, '')
                       AND payload_hash = \(submission.payloadHash)
                    """)
                return StoredEvent(eventID: try existing.single().decode("id", as: Int64.self), isNew: false, outbox: nil)
            }
            let id = try row.decode("id", as: Int64.self)
            let entry = try await enqueue(
                kind: .submission, eventID: id, routingKey: submission.originalTransactionID,
                traceID: submission.traceID, delay: publishGrace, on: connection)
            return StoredEvent(eventID: id, isNew: true, outbox: entry)
        }
    }

    /// Where a stored event stands: its status and error code; nil when no event of that kind has the id.
    public func status(of kind: EventKind, id: Int64) async throws -> (status: String, errorCode: String?)? {
        let rows = try await pool.query(
            """
            SELECT e.process_status, e.error_code FROM inbound_event_key k
              JOIN inbound_event e ON e.id = k.id AND e.received_at = k.received_at
             WHERE k.id = \(id) AND e.kind = \(kind.rawValue)
            """)
        guard let row = rows.first else { return nil }
        return (try row.decode("process_status"), try row.decode("error_code", as: String?.self))
    }

    /// Where the notification with this UUID stands; nil when it was never stored.
    public func status(ofNotification uuid: String) async throws -> (status: String, errorCode: String?)? {
        let rows = try await pool.query(
            """
            SELECT e.process_status, e.error_code FROM inbound_event_key k
              JOIN inbound_event e ON e.id = k.id AND e.received_at = k.received_at
             WHERE k.notification_uuid = \(uuid)
            """)
        guard let row = rows.first else { return nil }
        return (try row.decode("process_status"), try row.decode("error_code", as: String?.self))
    }
}
