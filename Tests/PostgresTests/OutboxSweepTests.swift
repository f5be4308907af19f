import Foundation
import Postgres
import Storage
import TestSupport
import Testing

/// The sweep that queues again the events a worker should have taken by now, on a real PostgreSQL:
/// which events it takes, in which order, and that it takes each once per grace period.
@Suite struct OutboxSweepTests {
    /// Events of every status and age, across two months; ids in the order of their age.
    static func withEvents(_ body: (EventStore) async throws -> Void) async throws {
        try await Fixture.withSchema { pool, _ in
            try await Migrator(pool: pool, logger: Fixture.logger).migrate(Migrator.bundled())
            try await pool.query(
                """
                WITH e (id, status, received_at, next_retry_at, lease_expires_at, republished_at) AS (
                    VALUES (1, 'RECEIVED', now() - interval '40 days', NULL::timestamptz, NULL::timestamptz, NULL::timestamptz),
                           (2, 'RETRY_WAIT', now() - interval '3 days', now() - interval '1 minute', NULL, NULL),
                           (3, 'PROCESSING', now() - interval '2 days', NULL, now() - interval '1 second', NULL),
                           (4, 'RETRY_WAIT', now() - interval '1 day', now() + interval '1 hour', NULL, NULL),
                           (5, 'PROCESSING', now() - interval '1 day', NULL, now() + interval '1 minute', NULL),
                           (6, 'RECEIVED', now() - interval '10 minutes', NULL, NULL, now() - interval '5 seconds'),
                           (7, 'SUCCEEDED', now() - interval '10 minutes', NULL, NULL, NULL),
                           (8, 'DEAD', now() - interval '10 minutes', NULL, NULL, NULL),
                           (9, 'RECEIVED', now() - interval '2 seconds', NULL, NULL, NULL)
                ), key AS (
                    INSERT INTO inbound_event_key (id, received_at, notification_uuid, environment)
                    SELECT id, received_at, 'n' || id, 'Sandbox' FROM e
                )
                INSERT INTO inbound_event (id, kind, notification_uuid, notification_type, environment, routing_key,
                                           process_status, received_at, next_retry_at, lease_expires_at, republished_at)
                SELECT id, 'notification', 'n' || id, 'DID_RENEW', 'Sandbox', 'o' || id, status, received_at, next_retry_at,
                       lease_expires_at, republished_at
                  FROM e
                """)
            try await body(EventStore(pool: pool, topic: "events"))
        }
    }

    static func queued(_ outbox: EventStore) async throws -> [Int64] {
        try await outbox.pool.query("SELECT event_id FROM event_outbox ORDER BY event_id").map { try $0.decode("event_id") }
    }

    @Test func dueRetriesLapsedLeasesAndStuckEventsAreQueuedOncePerGrace() async throws {
        try await Self.withEvents { (outbox: EventStore) async throws in
            let queued = try await outbox.requeueStuck(stuckAfter: .seconds(60), republishGrace: .seconds(30))
            // Not 4 (retry not due), 5 (lease held), 6 (republished 5 s ago), 7 and 8 (done), 9 (fresh).
            #expect(queued == 3)
            #expect(try await Self.queued(outbox) == [1, 2, 3])
            #expect(try await outbox.requeueStuck(stuckAfter: .seconds(60), republishGrace: .seconds(30)) == 0)
            // Once the grace has passed, what is still due is queued again (its message is gone).
            try await outbox.pool.query("DELETE FROM event_outbox")
            try await outbox.pool.query("UPDATE inbound_event SET republished_at = now() - interval '1 minute'")
            #expect(try await outbox.requeueStuck(stuckAfter: .seconds(60), republishGrace: .seconds(30)) == 4)
            #expect(try await Self.queued(outbox) == [1, 2, 3, 6])
        }
    }

    @Test func theOldestAreTakenFirstAndTheRestAtTheNextPass() async throws {
        try await Self.withEvents { (outbox: EventStore) async throws in
            #expect(try await outbox.requeueStuck(stuckAfter: .seconds(60), republishGrace: .seconds(30), limit: 2) == 2)
            #expect(try await Self.queued(outbox) == [1, 2])
            #expect(try await outbox.requeueStuck(stuckAfter: .seconds(60), republishGrace: .seconds(30), limit: 2) == 1)
            #expect(try await Self.queued(outbox) == [1, 2, 3])
        }
    }
}
