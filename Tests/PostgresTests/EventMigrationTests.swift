import Events
import Foundation
import Postgres
import Storage
import Testing

/// Migration 0010: the two event tables become one with one id space, and whatever named a
/// submission by (kind, id) follows it to its new id.
@Suite struct EventMigrationTests {
    @Test func submissionsAreRenumberedAboveEveryIdAndTheirReferencesFollow() async throws {
        try await Fixture.acrossMigration(
            10,
            seed: """
                INSERT INTO apple_notification_event (notification_uuid, notification_type, environment, routing_key)
                VALUES ('n1', 'DID_RENEW', 'Sandbox', 'o1'), ('n2', 'DID_RENEW', 'Sandbox', 'o2');
                INSERT INTO transaction_submission (submission_kind, user_id, order_no, environment, transaction_id,
                    original_transaction_id, payload_hash, routing_key, process_status, error_code)
                SELECT 'CLIENT', 'alice', 'order-' || n, 'Sandbox', 't' || n, 'o' || n, 'hash' || n, 'o' || n,
                       CASE WHEN n = 2 THEN 'DEAD' ELSE 'SUCCEEDED' END, CASE WHEN n = 2 THEN 'UNMATCHED_ACCOUNT' END
                  FROM generate_series(1, 5) AS n;
                INSERT INTO event_outbox (event_kind, event_id, topic, routing_key)
                VALUES ('submission', 3, 't', 'o3'), ('notification', 2, 't', 'o2');
                INSERT INTO processed_event (event_kind, event_id, worker_id, attempt)
                VALUES ('submission', 1, 'w', 1), ('submission', 4, 'w', 1), ('notification', 1, 'w', 1);
                INSERT INTO status_history (entity_type, entity_key, current_status, cause, event_kind, event_id)
                VALUES ('ORDER', 'order-1', 'FULFILLED', 'CLIENT_SUBMISSION', 'submission', 1);
                INSERT INTO unmatched_fact (event_kind, event_id, reason, environment)
                VALUES ('submission', 2, 'UNMATCHED_ACCOUNT', 'Sandbox');
                """
        ) { pool in

            func ids(_ sql: String) async throws -> [Int64] {
                try await pool.query(PostgresQuery(unsafeSQL: sql)).map { try $0.decode(0, as: Int64.self) }
            }
            // Notifications keep their ids; submissions follow in their old order above both series.
            #expect(try await ids("SELECT id FROM inbound_event WHERE kind = 'notification' ORDER BY id") == [1, 2])
            let submissions = try await ids("SELECT id FROM inbound_event WHERE kind = 'submission' ORDER BY order_no")
            #expect(submissions.count == 5)
            #expect(submissions == submissions.sorted() && submissions[0] > 5)
            let new = Dictionary(uniqueKeysWithValues: zip(Int64(1)...5, submissions))
            #expect(try await ids("SELECT event_id FROM event_outbox WHERE event_kind = 'submission'") == [new[3]!])
            #expect(try await ids("SELECT event_id FROM event_outbox WHERE event_kind = 'notification'") == [2])
            #expect(
                try await ids("SELECT event_id FROM processed_event WHERE event_kind = 'submission' ORDER BY event_id")
                    == [new[1]!, new[4]!])
            #expect(try await ids("SELECT event_id FROM status_history") == [new[1]!])
            #expect(try await ids("SELECT event_id FROM unmatched_fact") == [new[2]!])
            #expect(
                try await ids("SELECT id FROM inbound_event WHERE process_status = 'DEAD' AND error_code = 'UNMATCHED_ACCOUNT'")
                    == [new[2]!])

            // New events continue the one sequence, and the deduplication of each kind still holds.
            let store = EventStore(pool: pool, topic: "t")
            let notification = try await store.insertNotification(
                NewNotificationEvent(notificationUUID: "n3", notificationType: "DID_RENEW", environment: "Sandbox", routingKey: "o3"))
            #expect(notification.eventID > submissions.last!)
            let again = try await store.insertNotification(
                NewNotificationEvent(notificationUUID: "n1", notificationType: "DID_RENEW", environment: "Sandbox", routingKey: "o1"))
            #expect(!again.isNew && again.eventID == 1)
            let resubmitted = try await store.insertSubmission(
                NewSubmission(
                    kind: "CLIENT", userID: "alice", orderNo: "order-3", environment: "Sandbox", transactionID: "t3",
                    originalTransactionID: "o3", payloadHash: "hash3", sealedPayload: [1], payloadKeyID: "k", traceID: nil))
            #expect(!resubmitted.isNew && resubmitted.eventID == new[3]!)

            // The status of an id is only the status of the event of that kind.
            #expect(try await store.status(of: .submission, id: new[2]!)?.status == "DEAD")
            #expect(try await store.status(of: .notification, id: new[2]!) == nil)

            // replay_dead_events covers every kind with one statement.
            let replayed = try await store.replayDead(
                errorCode: "UNMATCHED_ACCOUNT", operator: "test", reason: "user added")
            #expect(replayed == 1)
            #expect(try await store.status(of: .submission, id: new[2]!)?.status == "RECEIVED")
        }
    }

    /// An envelope published before the renumbering names a submission by an id that is now a
    /// notification's (or nobody's): the claim takes nothing, so the wrong event is never applied.
    @Test func aClaimWhoseKindDiffersFromTheStoredEventTakesNothing() async throws {
        try await Fixture.withSchema { pool, _ in
            try await Migrator(pool: pool, logger: Fixture.logger).migrate(try Migrator.bundled())
            let store = EventStore(pool: pool, topic: "t")
            let stored = try await store.insertNotification(
                NewNotificationEvent(notificationUUID: "n1", notificationType: "DID_RENEW", environment: "Sandbox", routingKey: "o1"))
            let claimed = try await store.claim(
                [
                    EventEnvelope(kind: .submission, eventID: stored.eventID, traceID: nil),
                    EventEnvelope(kind: .submission, eventID: stored.eventID + 100, traceID: nil),
                ], owner: "w", lease: .seconds(60))
            #expect(claimed.allSatisfy { $0 == nil })
            #expect(try await store.status(of: .notification, id: stored.eventID)?.status == "RECEIVED")
            let right = try await store.claim(
                [EventEnvelope(kind: .notification, eventID: stored.eventID, traceID: nil)], owner: "w", lease: .seconds(60))
            #expect(right.first??.id == stored.eventID)
        }
    }

    /// Migration 0028: each key row gets its event's environment and ids, found then through the
    /// key table's indexes alone; a key row written without them (a previous version's pod during
    /// a rolling upgrade) is still accepted.
    @Test func keyRowsTakeTheirEventsIds() async throws {
        try await Fixture.acrossMigration(
            28,
            seed: """
                WITH key AS (
                    INSERT INTO inbound_event_key (received_at, notification_uuid)
                    SELECT now() - n * interval '40 days', 'n' || n FROM generate_series(1, 3) AS n
                    RETURNING id, received_at, notification_uuid
                )
                INSERT INTO inbound_event (id, received_at, kind, notification_uuid, notification_type, environment,
                                           transaction_id, original_transaction_id, routing_key)
                SELECT id, received_at, 'notification', notification_uuid, 'DID_RENEW',
                       CASE WHEN notification_uuid = 'n1' THEN 'Production' ELSE 'Sandbox' END,
                       't-' || notification_uuid, 'o-' || notification_uuid, 'o-' || notification_uuid
                  FROM key;
                """
        ) { pool in
            try await pool.query("INSERT INTO inbound_event_key (received_at, notification_uuid) VALUES (now(), 'old-pod')")
            let rows = try await pool.query(
                "SELECT notification_uuid, environment, transaction_id, original_transaction_id FROM inbound_event_key ORDER BY notification_uuid"
            ).map { row in
                try ["notification_uuid", "environment", "transaction_id", "original_transaction_id"].map {
                    try row.decode($0, as: String?.self)
                }
            }
            #expect(
                rows == [
                    ["n1", "Production", "t-n1", "o-n1"], ["n2", "Sandbox", "t-n2", "o-n2"], ["n3", "Sandbox", "t-n3", "o-n3"],
                    ["old-pod", nil, nil, nil],
                ])
            let indexes = try await pool.query(
                """
                SELECT relname FROM pg_class
                 WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('i', 'I')
                   AND relname IN ('inbound_event_otid_idx', 'inbound_event_transaction_idx',
                                   'inbound_event_notification_received_idx', 'inbound_event_submitter_idx',
                                   'inbound_event_key_original_idx', 'inbound_event_key_transaction_idx',
                                   'inbound_event_key_production_idx')
                 ORDER BY relname
                """
            ).map { try $0.decode("relname", as: String.self) }
            #expect(
                indexes == ["inbound_event_key_original_idx", "inbound_event_key_production_idx", "inbound_event_key_transaction_idx"])
        }
    }
}
