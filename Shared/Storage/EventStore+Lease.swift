import Events
import Foundation
import Postgres
import ServiceRuntime

/// The lifecycle of stored events under workers' leases: claims, retries and burials, the
/// wake-up of the waiting ingress, and the operator's replay of dead events. Completion is part of
/// the worker's own transaction (`FulfillmentStore`), so it commits with the event's effects.
extension EventStore {
    /// Claims many events at once in one statement (the worker's group commit of claims); returns
    /// one result per envelope, in order. An event named twice is claimed for its first envelope
    /// only, as two claims one after the other would have done. An envelope whose kind is not the
    /// stored event's (a message published before its event was renumbered) claims nothing.
    ///
    /// The claim commits asynchronously (no WAL flush of its own): losing it in a server crash only
    /// makes the event claimable again, and the worker's transaction that applies the event commits
    /// synchronously, flushing the claim with it. One flush per event instead of two.
    ///
    /// The status test is a CASE, not an OR of the partial indexes' predicates, and the kind is
    /// tested on an expression, so the primary key is the only way in: with the OR, a plan made
    /// while few events waited read the whole RECEIVED index and its heap pages at every claim, so
    /// each claim cost grew with the backlog. The rows are found through their keys, whose
    /// received_at names their month: each is read in its own partition only, however many months
    /// the table holds.
    ///
    /// Generic plans (hence the transaction around the one statement): planning an UPDATE of the
    /// partitioned table again for every claim was a quarter of PostgreSQL's CPU per event
    /// (fulfillment-throughput.sh: 0.80 -> 0.59 ms, 1,391 -> 1,673 events/s with 2 workers).
    public func claim(_ envelopes: [EventEnvelope], owner: String, lease: Duration) async throws -> [ClaimedEvent?] {
        guard !envelopes.isEmpty else { return [] }
        let rows = try await pool.transaction(genericPlans: true) { db in
            try await db.query(
                """
                UPDATE inbound_event e
                   SET process_status = \(sql: EventStatus.processing.literal), lease_owner = \(owner),
                       lease_expires_at = now() + make_interval(secs => \(lease.inSeconds)), updated_at = now()
                  FROM (SELECT set_config('synchronous_commit', 'off', true)) AS asynchronous_commit, inbound_event_key k
                 WHERE k.id = ANY(\(PostgresArray(envelopes.map(\.eventID)))::bigint[])
                   AND e.id = k.id AND e.received_at = k.received_at
                   AND e.kind || ':' || e.id = ANY(\(PostgresArray(envelopes.map(Self.key)))::text[])
                   AND CASE e.process_status
                           WHEN \(sql: EventStatus.received.literal) THEN true
                           WHEN \(sql: EventStatus.retryWait.literal) THEN e.next_retry_at <= now()
                           WHEN \(sql: EventStatus.processing.literal) THEN e.lease_expires_at < now()
                           ELSE false
                       END
                RETURNING e.kind, e.id, e.retry_count, e.routing_key, e.trace_id, e.signed_payload, e.payload_key_id,
                          e.redacted_at IS NOT NULL AS redacted, e.environment, e.notification_uuid, e.notification_type,
                          e.subtype, e.submission_kind, e.user_id, e.order_no, e.payload_hash
                """)
        }
        var claimed: [Int64: ClaimedEvent] = [:]
        for row in rows {
            let event = try Self.claimedEvent(row)
            claimed[event.id] = event
        }
        return envelopes.map { envelope in
            guard claimed[envelope.eventID]?.kind == envelope.kind else { return nil }
            return claimed.removeValue(forKey: envelope.eventID)
        }
    }

    /// Extends the leases `owner` still holds on these events to `lease` from now, in one
    /// statement (the worker's lease heartbeat); returns the ids renewed. An event whose lease
    /// another worker took, or that was completed meanwhile, is left alone. Found through their
    /// keys, as a claim finds them, so each is read in its own month only.
    ///
    /// Rows locked right now are skipped, not waited for: the worker's own transaction holds an
    /// event's row while applying it (nobody can claim it meanwhile, and it ends SUCCEEDED or
    /// with the lease as it was), and one waiting heartbeat would let every other lease run out.
    public func renew(_ ids: [Int64], owner: String, lease: Duration) async throws -> [Int64] {
        guard !ids.isEmpty else { return [] }
        return try await pool.query(
            """
            WITH held AS (
                SELECT e.id, e.received_at FROM inbound_event_key k
                  JOIN inbound_event e ON e.id = k.id AND e.received_at = k.received_at
                 WHERE k.id = ANY(\(PostgresArray(ids))::bigint[])
                   AND CASE e.process_status WHEN \(sql: EventStatus.processing.literal) THEN e.lease_owner = \(owner) ELSE false END
                   FOR UPDATE OF e SKIP LOCKED
            )
            UPDATE inbound_event e SET lease_expires_at = now() + make_interval(secs => \(lease.inSeconds))
              FROM held WHERE e.id = held.id AND e.received_at = held.received_at
            RETURNING e.id
            """
        ).map { try $0.decode("id") }
    }

    /// "kind:id", the identity an envelope names.
    private static func key(_ envelope: EventEnvelope) -> String { EventCompletion.key(kind: envelope.kind, id: envelope.eventID) }

    private static func claimedEvent(_ row: PostgresRow) throws -> ClaimedEvent {
        let kind = EventKind(rawValue: try row.decode("kind"))
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
                keyID: try row.decode("payload_key_id", as: String?.self), redacted: try row.decode("redacted"),
                environment: try row.decode("environment"),
                origin: origin))
    }

    /// Keeps the summary of a fact that could not be attributed (`unmatched_fact`), in the worker's
    /// transaction, so it can be found and replayed; a replayed fact that fails again is kept again.
    public func keepUnmatched(_ event: ClaimedEvent, reason: String, summary: UnmatchedSummary, on db: PostgresConnection)
        async throws
    {
        try await db.query(
            """
            INSERT INTO unmatched_fact (
                event_kind, event_id, reason, environment, notification_type, subtype, transaction_id,
                original_transaction_id, product_id, app_account_token, submitted_by)
            VALUES (\(event.kind.rawValue), \(event.id), \(reason), \(event.payload.environment), \(summary.notificationType),
                    \(summary.subtype), \(summary.transactionID), \(summary.originalTransactionID), \(summary.productID),
                    \(summary.appAccountToken), \(summary.submittedBy))
            ON CONFLICT (event_kind, event_id) DO UPDATE SET
                reason = EXCLUDED.reason, product_id = EXCLUDED.product_id, app_account_token = EXCLUDED.app_account_token,
                updated_at = now(), replayed_at = NULL
            """)
    }

    // MARK: - The fulfillment statement's parts (one statement per batch of events, for speed)

    /// Marks the batch's events SUCCEEDED (`RETURNING e.kind, e.id`), through their key rows.
    public static func succeed(_ events: [ClaimedEvent]) -> PostgresQuery {
        """
        UPDATE inbound_event e
           SET process_status = \(sql: EventStatus.succeeded.literal), processed_at = now(), lease_owner = NULL,
               lease_expires_at = NULL, error_code = NULL, error_message = NULL, updated_at = now()
          FROM inbound_event_key k
         WHERE k.id = ANY(\(PostgresArray(events.map(\.id)))::bigint[])
           AND e.id = k.id AND e.received_at = k.received_at
        RETURNING e.kind, e.id
        """
    }

    /// The proof of each event the CTE `succeeded` (the statement of `succeed`) completed: which
    /// worker, which attempt (`RETURNING 1`).
    public static func prove(_ events: [ClaimedEvent], owner: String, succeeded: StaticString) -> PostgresQuery {
        """
        INSERT INTO processed_event (event_kind, event_id, worker_id, attempt)
        SELECT p.kind, p.id, \(owner), p.attempt
          FROM unnest(\(PostgresArray(events.map(\.kind.rawValue)))::text[], \(PostgresArray(events.map(\.id)))::bigint[],
                      \(PostgresArray(events.map { $0.retryCount + 1 }))::integer[]) AS p(kind, id, attempt)
          JOIN \(sql: succeeded) USING (kind, id)
        RETURNING 1
        """
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
    /// (a frozen chain, an unmatched fact's summary). The lease test is a CASE for the reason the
    /// worker's lock gives: under that transaction's generic plans a status predicate reads every
    /// month's PROCESSING rows.
    public func fail(
        _ event: ClaimedEvent, owner: String, code: String, message: String, retryAt delay: Duration?,
        on connection: PostgresConnection
    ) async throws {
        let status: EventStatus = delay == nil ? .dead : .retryWait
        try await connection.query(
            """
            UPDATE inbound_event e
               SET process_status = \(status), retry_count = e.retry_count + 1,
                   next_retry_at = CASE WHEN \(delay?.inSeconds)::float8 IS NULL THEN NULL
                                        ELSE now() + make_interval(secs => \(delay?.inSeconds)::float8) END,
                   error_code = \(code), error_message = \(message), lease_owner = NULL, lease_expires_at = NULL,
                   updated_at = now()
              FROM inbound_event_key k
             WHERE k.id = \(event.id) AND e.id = k.id AND e.received_at = k.received_at
               AND CASE e.process_status WHEN \(sql: EventStatus.processing.literal) THEN e.lease_owner = \(owner) ELSE false END
            """)
    }

    /// Wakes the ingress requests waiting for these events, in one statement.
    public func announceCompleted(_ events: [(kind: EventKind, id: Int64)]) async throws {
        let payloads = events.map { EventCompletion.key(kind: $0.kind, id: $0.id) }
        try await pool.query(
            "SELECT pg_notify(\(EventCompletion.channel), p) FROM unnest(\(PostgresArray(payloads))::text[]) AS p")
    }

    /// Puts every DEAD event with this error code back to RECEIVED (`replay_dead_events`, which the
    /// sweeper then re-publishes), with the operator's audit row in the same transaction. Returns
    /// how many events were put back.
    public func replayDead(errorCode: String, operator operatorName: String, reason: String) async throws -> Int {
        struct Before: Encodable, Sendable {
            var errorCode: String
            var dead: Int
        }
        struct After: Encodable, Sendable {
            var errorCode: String
            var replayed: Int
        }
        return try await pool.transaction { db in
            let replayed: Int = try await db.query("SELECT replay_dead_events(\(errorCode)) AS replayed").single()
                .decode("replayed")
            try await AuditLog(pool: pool).record(
                on: db, operator: operatorName, action: "DEAD_EVENTS_REPLAYED", reason: reason,
                before: Before(errorCode: errorCode, dead: replayed), after: After(errorCode: errorCode, replayed: replayed))
            return replayed
        }
    }

    /// Puts the chain's DEAD events with one of these error codes (of `kind` only, when given) back
    /// to RECEIVED with a fresh retry budget and queues their messages on `topic` at once, inside the caller's transaction
    /// (a binding or a resolution that makes them applicable commits with it). Their unmatched
    /// summaries are marked replayed. Returns how many events were put back.
    public func replayDead(
        environment: String, originalTransactionID: String, codes: [String], onlyKind kind: EventKind? = nil, topic: String?,
        on db: PostgresConnection
    ) async throws -> Int {
        try await replayDead(
            eventID: nil, environment: environment, originalTransactionID: originalTransactionID, codes: codes, kind: kind,
            topic: topic, on: db)
    }

    /// Puts one DEAD event back to RECEIVED with a fresh retry budget, queued on `topic` at once
    /// (nil: the sweeper re-publishes it), with the operator's audit row in the same transaction.
    /// Any other state is refused with `EVENT_NOT_REPLAYABLE`, an unknown id with `EVENT_NOT_FOUND`.
    /// Returns the event's error code before the replay.
    @discardableResult
    public func replayDead(eventID: Int64, topic: String?, operator operatorName: String, reason: String) async throws
        -> String?
    {
        struct State: Encodable, Sendable {
            var eventId: Int64
            var status: String
            var errorCode: String?
        }
        return try await pool.transaction { db in
            guard
                let row = try await db.query(
                    "SELECT process_status, error_code FROM inbound_event WHERE id = \(eventID) FOR UPDATE"
                ).first
            else { throw EventReplayRefusal(code: .notFound, message: "no event \(eventID)") }
            let status: EventStatus = try row.decode("process_status")
            let errorCode: String? = try row.decode("error_code")
            guard status == .dead else {
                throw EventReplayRefusal(
                    code: .notReplayable, message: "event \(eventID) is \(status.rawValue); only a DEAD event is replayed")
            }
            _ = try await replayDead(
                eventID: eventID, environment: nil, originalTransactionID: nil, codes: nil, kind: nil, topic: topic, on: db)
            try await AuditLog(pool: pool).record(
                on: db, operator: operatorName, action: "DEAD_EVENT_REPLAYED", reason: reason,
                before: State(eventId: eventID, status: EventStatus.dead.rawValue, errorCode: errorCode),
                after: State(eventId: eventID, status: EventStatus.received.rawValue, errorCode: nil))
            return errorCode
        }
    }

    /// The one replay statement: DEAD events matching every filter given.
    private func replayDead(
        eventID: Int64?, environment: String?, originalTransactionID: String?, codes: [String]?, kind: EventKind?,
        topic: String?, on db: PostgresConnection
    ) async throws -> Int {
        try await db.query(
            """
            WITH replayed AS (
                UPDATE inbound_event
                   SET process_status = \(sql: EventStatus.received.literal), retry_count = 0, next_retry_at = NULL,
                       error_code = NULL, error_message = NULL,
                       republished_at = CASE WHEN \(topic)::text IS NULL THEN NULL ELSE now() END, updated_at = now()
                 WHERE process_status = \(sql: EventStatus.dead.literal)
                   AND (\(eventID)::bigint IS NULL OR id = \(eventID))
                   AND (\(environment)::text IS NULL OR environment = \(environment))
                   AND (\(originalTransactionID)::text IS NULL OR original_transaction_id = \(originalTransactionID))
                   AND (\(codes == nil) OR error_code = ANY(\(PostgresArray(codes ?? []))::text[]))
                   AND (\(kind?.rawValue)::text IS NULL OR kind = \(kind?.rawValue))
                RETURNING kind, id, routing_key, trace_id
            ), marked AS (
                UPDATE unmatched_fact u SET replayed_at = now(), updated_at = now()
                  FROM replayed r WHERE u.event_kind = r.kind AND u.event_id = r.id
            ), queued AS (
                INSERT INTO event_outbox (event_kind, event_id, topic, routing_key, trace_id)
                SELECT r.kind, r.id, \(topic), r.routing_key, r.trace_id FROM replayed r
                 WHERE \(topic)::text IS NOT NULL AND NOT EXISTS (SELECT 1 FROM event_outbox o WHERE o.event_kind = r.kind AND o.event_id = r.id)
            )
            SELECT count(*) AS replayed FROM replayed
            """
        ).single().decode("replayed", as: Int.self)
    }

    /// Where several events stand (the `subsctl requery` follow-up), by id.
    public func statuses(of ids: [Int64]) async throws -> [(id: Int64, status: EventStatus, errorCode: String?)] {
        try await pool.query(
            """
            SELECT id, process_status, error_code FROM inbound_event
             WHERE id = ANY(\(PostgresArray(ids))::bigint[]) ORDER BY id
            """
        ).map { row in
            (try row.decode("id"), try row.decode("process_status"), try row.decode("error_code", as: String?.self))
        }
    }
}

/// Why an operator's replay of one event was refused; `code` is the stable error code.
public struct EventReplayRefusal: Error, Sendable, CustomStringConvertible {
    public enum Code: String, Sendable {
        /// The event is not DEAD (it succeeded, or is still on its way).
        case notReplayable = "EVENT_NOT_REPLAYABLE"
        case notFound = "EVENT_NOT_FOUND"
    }
    public let code: Code
    public let message: String
    public var description: String { "\(code.rawValue): \(message)" }
}

/// What an operator needs to find an unattributed fact again.
public struct UnmatchedSummary: Sendable {
    public var notificationType: String?
    public var subtype: String?
    public var transactionID: String?
    public var originalTransactionID: String?
    public var productID: String?
    public var appAccountToken: String?
    public var submittedBy: String?

    public init(
        notificationType: String?, subtype: String?, transactionID: String?, originalTransactionID: String?, productID: String?,
        appAccountToken: String?, submittedBy: String?
    ) {
        self.notificationType = notificationType
        self.subtype = subtype
        self.transactionID = transactionID
        self.originalTransactionID = originalTransactionID
        self.productID = productID
        self.appAccountToken = appAccountToken
        self.submittedBy = submittedBy
    }
}
