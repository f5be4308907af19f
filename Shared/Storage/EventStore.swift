import Events
import Foundation
import Postgres
import ServiceRuntime

/// A notification to store: the columns of `apple_notification_event`.
public struct NewNotificationEvent: Sendable {
    public var notificationUUID: String
    public var notificationType: String
    public var subtype: String?
    public var environment: String
    public var signedDate: Date?
    public var transactionID: String?
    public var originalTransactionID: String?
    /// Kafka key: the original transaction id, else the notification UUID.
    public var routingKey: String
    public var sealedPayload: [UInt8]?
    public var payloadKeyID: String?
    public var traceID: String?

    public init(
        notificationUUID: String, notificationType: String, subtype: String? = nil, environment: String,
        signedDate: Date? = nil, transactionID: String? = nil, originalTransactionID: String? = nil,
        routingKey: String, sealedPayload: [UInt8]? = nil, payloadKeyID: String? = nil, traceID: String? = nil
    ) {
        self.notificationUUID = notificationUUID
        self.notificationType = notificationType
        self.subtype = subtype
        self.environment = environment
        self.signedDate = signedDate
        self.transactionID = transactionID
        self.originalTransactionID = originalTransactionID
        self.routingKey = routingKey
        self.sealedPayload = sealedPayload
        self.payloadKeyID = payloadKeyID
        self.traceID = traceID
    }
}

/// A signed transaction a client uploaded (`CLIENT`, for an order) or observed (`OBSERVED`).
public struct NewSubmission: Sendable {
    public var kind: String
    /// The logged-in user who sent it (attribution is by the signed appAccountToken, not by this).
    public var userID: String
    public var orderNo: String?
    public var environment: String
    public var transactionID: String
    public var originalTransactionID: String
    /// Hex SHA-256 of the JWS; with the kind, user and order it identifies a repeated upload.
    public var payloadHash: String
    public var sealedPayload: [UInt8]
    public var payloadKeyID: String
    public var traceID: String?

    public init(
        kind: String, userID: String, orderNo: String?, environment: String, transactionID: String,
        originalTransactionID: String, payloadHash: String, sealedPayload: [UInt8], payloadKeyID: String,
        traceID: String?
    ) {
        self.kind = kind
        self.userID = userID
        self.orderNo = orderNo
        self.environment = environment
        self.transactionID = transactionID
        self.originalTransactionID = originalTransactionID
        self.payloadHash = payloadHash
        self.sealedPayload = sealedPayload
        self.payloadKeyID = payloadKeyID
        self.traceID = traceID
    }
}

/// A message waiting in the outbox to be published.
public struct OutboxEntry: Sendable, Equatable {
    public var id: Int64
    public var envelope: EventEnvelope
    public var topic: String
    public var routingKey: String
}

/// Result of storing an inbound event.
public struct StoredEvent: Sendable, Equatable {
    public var eventID: Int64
    /// False when the event was already stored (a duplicate delivery): nothing new was written.
    public var isNew: Bool
    /// The outbox row to publish and then delete; nil for a duplicate.
    public var outbox: OutboxEntry?
}

/// An event row a worker holds under a lease.
public struct ClaimedEvent: Sendable {
    public var kind: EventKind
    public var id: Int64
    /// Number of earlier failed attempts.
    public var retryCount: Int
    public var routingKey: String
    public var traceID: String?
    /// Read with the claim, so applying the event costs no extra query.
    public var payload: EventPayload
}

/// What an event row holds for the worker: the sealed signed payload and where it came from.
public struct EventPayload: Sendable {
    /// AES-256-GCM ciphertext of the JWS; nil once a retention job redacted it.
    public var sealed: [UInt8]?
    /// The key that sealed it (`PAYLOAD_ENCRYPTION_KEYS`).
    public var keyID: String?
    /// The App Store environment the ingress verified.
    public var environment: String
    public var origin: EventOrigin
}

/// Which intake stored an event, with the columns that say what it is.
public enum EventOrigin: Sendable, Hashable {
    case notification(uuid: String, type: String, subtype: String?)
    /// A client upload (`CLIENT`, with its order) or observation (`OBSERVED`); `userID` is the
    /// logged-in user, `payloadHash` the hex SHA-256 of the JWS.
    case submission(kind: String, userID: String, orderNo: String?, payloadHash: String)

    /// The context the ingress sealed the payload under (it must be given again to open it).
    public var sealingContext: String {
        switch self {
        case .notification(let uuid, _, _): uuid
        case .submission(_, _, _, let hash): "submission:" + hash
        }
    }
}

/// The SQL of the event pipeline: intake with outbox, worker leases, retries and the sweeper.
public struct EventStore: Sendable {
    public let pool: PostgresPool
    public let topic: String

    public init(pool: PostgresPool, topic: String) {
        self.pool = pool
        self.topic = topic
    }

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
            INSERT INTO apple_notification_event
                (notification_uuid, notification_type, subtype, environment, signed_date, transaction_id,
                 original_transaction_id, routing_key, signed_payload, payload_key_id, trace_id)
            VALUES (\(event.notificationUUID), \(event.notificationType), \(event.subtype), \(event.environment),
                    \(event.signedDate), \(event.transactionID), \(event.originalTransactionID), \(event.routingKey),
                    \(event.sealedPayload), \(event.payloadKeyID), \(event.traceID))
            ON CONFLICT (notification_uuid) DO NOTHING
            RETURNING id
            """)
        guard let row = inserted.first else {
            let existing = try await connection.query(
                "SELECT id FROM apple_notification_event WHERE notification_uuid = \(event.notificationUUID)")
            return StoredEvent(eventID: try existing.first!.decode("id", as: Int64.self), isNew: false, outbox: nil)
        }
        let id = try row.decode("id", as: Int64.self)
        let outbox = try await enqueue(
            kind: .notification, eventID: id, routingKey: event.routingKey, traceID: event.traceID,
            delay: publishGrace, on: connection)
        return StoredEvent(eventID: id, isNew: true, outbox: outbox)
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
                    \(PostgresArray(events.map(\.traceID)))::text[]
                ) WITH ORDINALITY AS i(notification_uuid, notification_type, subtype, environment, signed_date,
                                       transaction_id, original_transaction_id, routing_key, signed_payload,
                                       payload_key_id, trace_id, position)
            ), inserted AS (
                INSERT INTO apple_notification_event
                    (notification_uuid, notification_type, subtype, environment, signed_date, transaction_id,
                     original_transaction_id, routing_key, signed_payload, payload_key_id, trace_id)
                SELECT notification_uuid, notification_type, subtype, environment, signed_date, transaction_id,
                       original_transaction_id, routing_key, signed_payload, payload_key_id, trace_id
                  FROM input ORDER BY position
                ON CONFLICT (notification_uuid) DO NOTHING
                RETURNING id, notification_uuid, routing_key, trace_id
            ), queued AS (
                INSERT INTO event_outbox (event_kind, event_id, topic, routing_key, trace_id, next_attempt_at)
                SELECT \(EventKind.notification.rawValue), id, \(topic), routing_key, trace_id,
                       now() + make_interval(secs => \(Self.seconds(publishGrace)))
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
        var existing: [String: Int64] = [:]
        let missing = Set(events.map(\.notificationUUID)).subtracting(new.keys)
        if !missing.isEmpty {
            for row in try await pool.query(
                """
                SELECT id, notification_uuid FROM apple_notification_event
                 WHERE notification_uuid = ANY(\(PostgresArray(Array(missing)))::text[])
                """)
            {
                existing[try row.decode("notification_uuid")] = try row.decode("id")
            }
        }
        return try events.map { event in
            if let stored = new.removeValue(forKey: event.notificationUUID) {
                existing[event.notificationUUID] = stored.eventID
                return StoredEvent(
                    eventID: stored.eventID, isNew: true,
                    outbox: OutboxEntry(
                        id: stored.outboxID,
                        envelope: EventEnvelope(kind: .notification, eventID: stored.eventID, traceID: event.traceID),
                        topic: topic, routingKey: event.routingKey))
            }
            guard let id = existing[event.notificationUUID] else {
                throw PostgresError.server(
                    sqlState: "XX000", message: "notification neither inserted nor found", constraint: nil)
            }
            return StoredEvent(eventID: id, isNew: false, outbox: nil)
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
                INSERT INTO transaction_submission
                    (submission_kind, user_id, order_no, environment, transaction_id, original_transaction_id,
                     payload_hash, routing_key, signed_payload, payload_key_id, trace_id)
                VALUES (\(submission.kind), \(submission.userID), \(submission.orderNo), \(submission.environment),
                        \(submission.transactionID), \(submission.originalTransactionID), \(submission.payloadHash),
                        \(submission.originalTransactionID), \(submission.sealedPayload), \(submission.payloadKeyID),
                        \(submission.traceID))
                ON CONFLICT (submission_kind, user_id, coalesce(order_no, ''), payload_hash) DO NOTHING
                RETURNING id
                """)
            guard let row = inserted.first else {
                let existing = try await connection.query(
                    """
                    SELECT id FROM transaction_submission
                     WHERE submission_kind = \(submission.kind) AND user_id = \(submission.userID)
                       AND coalesce(order_no, '') = coalesce(\(submission.orderNo)::text, '')
                       AND payload_hash = \(submission.payloadHash)
                    """)
                return StoredEvent(eventID: try existing.first!.decode("id", as: Int64.self), isNew: false, outbox: nil)
            }
            let id = try row.decode("id", as: Int64.self)
            let outbox = try await enqueue(
                kind: .submission, eventID: id, routingKey: submission.originalTransactionID,
                traceID: submission.traceID, delay: publishGrace, on: connection)
            return StoredEvent(eventID: id, isNew: true, outbox: outbox)
        }
    }

    /// Where a stored event stands: its status and error code.
    public func status(of kind: EventKind, id: Int64) async throws -> (status: String, errorCode: String?)? {
        guard let table = Self.table(for: kind) else { return nil }
        let rows = try await pool.query(
            PostgresQuery(
                unsafeSQL: "SELECT process_status, error_code FROM \(table) WHERE id = $1", binds: [id.postgresData]))
        guard let row = rows.first else { return nil }
        return (try row.decode("process_status"), try row.decode("error_code", as: String?.self))
    }

    func enqueue(
        kind: EventKind, eventID: Int64, routingKey: String, traceID: String?, delay: Duration,
        on connection: PostgresConnection
    ) async throws -> OutboxEntry {
        let seconds = Self.seconds(delay)
        let rows = try await connection.query(
            """
            INSERT INTO event_outbox (event_kind, event_id, topic, routing_key, trace_id, next_attempt_at)
            VALUES (\(kind.rawValue), \(eventID), \(topic), \(routingKey), \(traceID),
                    now() + make_interval(secs => \(seconds)))
            RETURNING id
            """)
        return OutboxEntry(
            id: try rows.first!.decode("id", as: Int64.self),
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
        let list = "{" + ids.map(String.init).joined(separator: ",") + "}"
        try await pool.query(
            """
            DELETE FROM event_outbox USING (SELECT set_config('synchronous_commit', 'off', true)) AS asynchronous_commit
             WHERE id = ANY(\(list)::bigint[])
            """)
    }

    /// Takes due outbox rows for publishing, safe with many relays: each row is taken by one relay
    /// (SKIP LOCKED) and pushed back by `retryAfter`, so a relay that dies mid-publish only delays it.
    public func claimDueOutbox(limit: Int, retryAfter: Duration) async throws -> [OutboxEntry] {
        let seconds = Self.seconds(retryAfter)
        let rows = try await pool.query(
            """
            WITH due AS (
                SELECT id FROM event_outbox WHERE next_attempt_at <= now()
                ORDER BY next_attempt_at LIMIT \(limit) FOR UPDATE SKIP LOCKED
            )
            UPDATE event_outbox o
               SET attempts = o.attempts + 1, next_attempt_at = now() + make_interval(secs => \(seconds))
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

    /// Claims many events at once, one statement per event table (the worker's group commit of
    /// claims); returns one result per envelope, in order. An event named twice is claimed for its
    /// first envelope only, as two claims one after the other would have done.
    ///
    /// The claim commits asynchronously (no WAL flush of its own): losing it in a server crash only
    /// makes the event claimable again, and the worker's transaction that applies the event commits
    /// synchronously, flushing the claim with it. One flush per event instead of two.
    ///
    /// The status test is a CASE, not an OR of the partial indexes' predicates, so the primary key
    /// is the only way in: with the OR, a plan made while few events waited read the whole RECEIVED
    /// index and its heap pages at every claim, so each claim cost grew with the backlog.
    public func claim(_ envelopes: [EventEnvelope], owner: String, lease: Duration) async throws -> [ClaimedEvent?] {
        var claimed: [EventKind: [Int64: ClaimedEvent]] = [:]
        for (kind, table) in Self.tables {
            let ids = envelopes.filter { $0.kind == kind }.map(\.eventID)
            guard !ids.isEmpty else { continue }
            let rows = try await pool.query(
                PostgresQuery(
                    unsafeSQL: """
                        UPDATE \(table)
                           SET process_status = 'PROCESSING', lease_owner = $1,
                               lease_expires_at = now() + make_interval(secs => $2), updated_at = now()
                          FROM (SELECT set_config('synchronous_commit', 'off', true)) AS asynchronous_commit
                         WHERE id = ANY($3)
                           AND CASE process_status
                                   WHEN 'RECEIVED' THEN true
                                   WHEN 'RETRY_WAIT' THEN next_retry_at <= now()
                                   WHEN 'PROCESSING' THEN lease_expires_at < now()
                                   ELSE false
                               END
                        RETURNING id, retry_count, routing_key, trace_id, signed_payload, payload_key_id, environment,
                                  \(Self.originColumns(for: kind))
                        """,
                    binds: [owner.postgresData, Self.seconds(lease).postgresData, PostgresArray(ids).postgresData]))
            for row in rows {
                let event = try Self.claimedEvent(kind, row)
                claimed[kind, default: [:]][event.id] = event
            }
        }
        return envelopes.map { claimed[$0.kind]?.removeValue(forKey: $0.eventID) }
    }

    private static func claimedEvent(_ kind: EventKind, _ row: PostgresRow) throws -> ClaimedEvent {
        let origin: EventOrigin
        if kind == .submission {
            origin = .submission(
                kind: try row.decode("submission_kind"), userID: try row.decode("user_id"),
                orderNo: try row.decode("order_no", as: String?.self), payloadHash: try row.decode("payload_hash"))
        } else {
            origin = .notification(
                uuid: try row.decode("notification_uuid"), type: try row.decode("notification_type"),
                subtype: try row.decode("subtype", as: String?.self))
        }
        return ClaimedEvent(
            kind: kind, id: try row.decode("id"), retryCount: try row.decode("retry_count"),
            routingKey: try row.decode("routing_key"), traceID: try row.decode("trace_id", as: String?.self),
            payload: EventPayload(
                sealed: try row.decode("signed_payload", as: [UInt8]?.self),
                keyID: try row.decode("payload_key_id", as: String?.self), environment: try row.decode("environment"),
                origin: origin))
    }

    /// The columns of each event table that say what the event is (constants, never input).
    static func originColumns(for kind: EventKind) -> String {
        kind == .submission
            ? "submission_kind, user_id, order_no, payload_hash" : "notification_uuid, notification_type, subtype"
    }

    /// Gives the event back for a later attempt (`RETRY_WAIT`), or buries it (`DEAD`) when `retryAt` is nil.
    public func fail(
        _ event: ClaimedEvent, owner: String, code: String, message: String, retryAt delay: Duration?
    ) async throws {
        try await pool.withConnection { connection in
            try await fail(event, owner: owner, code: code, message: message, retryAt: delay, on: connection)
        }
    }

    /// The same inside the worker's transaction, so a refusal commits together with what it records
    /// (a frozen chain, an unmatched fact's summary).
    public func fail(
        _ event: ClaimedEvent, owner: String, code: String, message: String, retryAt delay: Duration?,
        on connection: PostgresConnection
    ) async throws {
        let table = Self.table(for: event.kind)!
        let status = delay == nil ? "DEAD" : "RETRY_WAIT"
        try await connection.query(
            PostgresQuery(
                unsafeSQL: """
                    UPDATE \(table)
                       SET process_status = $1, retry_count = retry_count + 1,
                           next_retry_at = CASE WHEN $2::float8 IS NULL THEN NULL
                                                ELSE now() + make_interval(secs => $2::float8) END,
                           error_code = $3, error_message = $4, lease_owner = NULL, lease_expires_at = NULL,
                           updated_at = now()
                     WHERE id = $5 AND process_status = 'PROCESSING' AND lease_owner = $6
                    """,
                binds: [
                    status.postgresData, delay.map(Self.seconds).postgresData, code.postgresData,
                    message.postgresData, event.id.postgresData, owner.postgresData,
                ]))
    }

    /// Re-publishes events that need a worker and have no message on the way: retries that are due,
    /// leases that ran out (a crashed worker), and events still RECEIVED after `stuckAfter` (a broker
    /// that lost the message). Returns how many were queued; safe with several sweepers.
    public func sweep(stuckAfter: Duration, republishGrace: Duration, limit: Int = 500) async throws -> Int {
        var queued = 0
        for (kind, table) in Self.tables {
            let rows = try await pool.query(
                PostgresQuery(
                    unsafeSQL: """
                        WITH due AS (
                            SELECT id FROM \(table)
                             WHERE ((process_status = 'RETRY_WAIT' AND next_retry_at <= now())
                                 OR (process_status = 'PROCESSING' AND lease_expires_at < now())
                                 OR (process_status = 'RECEIVED' AND received_at < now() - make_interval(secs => $1)))
                               AND (republished_at IS NULL OR republished_at < now() - make_interval(secs => $2))
                             ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED
                        ), marked AS (
                            UPDATE \(table) e SET republished_at = now() FROM due WHERE e.id = due.id
                            RETURNING e.id, e.routing_key, e.trace_id
                        )
                        INSERT INTO event_outbox (event_kind, event_id, topic, routing_key, trace_id)
                        SELECT $4, m.id, $5, m.routing_key, m.trace_id FROM marked m
                         WHERE NOT EXISTS (SELECT 1 FROM event_outbox o WHERE o.event_kind = $4 AND o.event_id = m.id)
                        """,
                    binds: [
                        Self.seconds(stuckAfter).postgresData, Self.seconds(republishGrace).postgresData,
                        limit.postgresData, kind.rawValue.postgresData, topic.postgresData,
                    ]))
            queued += rows.affectedRows
        }
        return queued
    }

    /// Event kinds and their tables; table names are constants, never input.
    static let tables: [(EventKind, String)] = [
        (.notification, "apple_notification_event"), (.submission, "transaction_submission"),
    ]

    static func table(for kind: EventKind) -> String? { tables.first { $0.0 == kind }?.1 }

    static func seconds(_ duration: Duration) -> Double {
        duration.inSeconds
    }
}
