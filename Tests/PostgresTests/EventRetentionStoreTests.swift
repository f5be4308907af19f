import Events
import Foundation
import Postgres
import Storage
import Testing

/// The months of the event table: partitions created ahead (once), sealed payloads of applied
/// events redacted after the cutoff (never those on their way or DEAD), old months detached with
/// their keys released, and intake still exactly-once across months. A migrated schema each.
@Suite struct EventRetentionStoreTests {
    static func withMigratedSchema(_ body: (PostgresPool, EventStore) async throws -> Void) async throws {
        try await Fixture.withSchema { pool, _ in
            try await Migrator(pool: pool, logger: Fixture.logger).migrate(Migrator.bundled())
            try await body(pool, EventStore(pool: pool, topic: "t"))
        }
    }

    static func date(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

    /// Stores an event as the intake would have in another month: its key row and its row, with
    /// the given status; returns its id.
    @discardableResult
    static func insertEvent(
        _ uuid: String, receivedAt: String, status: String = "SUCCEEDED", payload: [UInt8]? = [1, 2, 3], on pool: PostgresPool
    ) async throws -> Int64 {
        try await pool.query(
            """
            WITH key AS (
                INSERT INTO inbound_event_key (received_at, notification_uuid, environment) VALUES (\(date(receivedAt)), \(uuid), 'Sandbox')
                RETURNING id, received_at
            )
            INSERT INTO inbound_event (id, received_at, kind, notification_uuid, notification_type, environment, routing_key,
                                       process_status, signed_payload, payload_key_id)
            SELECT id, received_at, 'notification', \(uuid), 'DID_RENEW', 'Sandbox', 'o-' || \(uuid), \(status), \(payload), 'k1'
              FROM key
            RETURNING id
            """
        ).first!.decode("id")
    }

    static func audits(_ action: String, on pool: PostgresPool) async throws -> Int {
        try await pool.query("SELECT count(*) AS n FROM audit_log WHERE action = \(action) AND operator = 'worker-1'").first!
            .decode("n", as: Int.self)
    }

    @Test func partitionsAreCreatedAheadOnceAndAudited() async throws {
        try await Self.withMigratedSchema { pool, store in
            // The migration made this month's and the next.
            #expect(try await store.monthsAhead(now: Date()) == 1)
            let now = Self.date("2031-01-15T10:00:00Z")
            #expect(try await store.monthsAhead(now: now) == 0)
            #expect(
                try await store.createPartitions(now: now, ahead: 2, by: "worker-1")
                    == ["inbound_event_2031_01", "inbound_event_2031_02", "inbound_event_2031_03"])
            #expect(try await store.createPartitions(now: now, ahead: 2, by: "worker-1").isEmpty)
            #expect(try await store.createPartitions(now: Self.date("2031-02-01T00:00:00Z"), ahead: 2, by: "worker-1") == ["inbound_event_2031_04"])
            #expect(try await store.monthsAhead(now: now) == 3)
            let months = try await store.partitions().filter { $0.name.hasPrefix("inbound_event_2031") }
            #expect(months.map(\.month) == ["2031-01", "2031-02", "2031-03", "2031-04"].map { Self.date("\($0)-01T00:00:00Z") })
            #expect(months.last?.end == Self.date("2031-05-01T00:00:00Z"))
            #expect(try await Self.audits("EVENT_PARTITION_CREATED", on: pool) == 4)
        }
    }

    @Test func rowsOfAMonthWithoutItsPartitionWaitInTheDefaultAndMoveIn() async throws {
        try await Self.withMigratedSchema { pool, store in
            let id = try await Self.insertEvent("late", receivedAt: "2031-05-31T23:59:59Z", on: pool)
            func table() async throws -> String {
                try await pool.query("SELECT tableoid::regclass::text AS t FROM inbound_event WHERE id = \(id)").first!.decode("t")
            }
            #expect(try await table().hasSuffix("inbound_event_default"))
            #expect(try await store.createPartitions(now: Self.date("2031-05-02T00:00:00Z"), ahead: 0, by: "worker-1") == ["inbound_event_2031_05"])
            #expect(try await table().hasSuffix("inbound_event_2031_05"))
        }
    }

    @Test func onlyAppliedPayloadsOlderThanTheCutoffAreRedactedOnce() async throws {
        try await Self.withMigratedSchema { pool, store in
            let old = [
                try await Self.insertEvent("a", receivedAt: "2025-01-10T00:00:00Z", on: pool),
                try await Self.insertEvent("b", receivedAt: "2025-02-10T00:00:00Z", on: pool),
                try await Self.insertEvent("c", receivedAt: "2025-02-27T23:59:59Z", on: pool),
            ]
            var kept = [
                try await Self.insertEvent("recent", receivedAt: "2025-02-28T00:00:01Z", on: pool),
                try await Self.insertEvent("dead", receivedAt: "2025-01-10T00:00:00Z", status: "DEAD", on: pool),
                try await Self.insertEvent("waiting", receivedAt: "2025-01-10T00:00:00Z", status: "RETRY_WAIT", on: pool),
                try await Self.insertEvent("received", receivedAt: "2025-01-10T00:00:00Z", status: "RECEIVED", on: pool),
                try await Self.insertEvent("processing", receivedAt: "2025-01-10T00:00:00Z", status: "PROCESSING", on: pool),
            ]
            kept.append(try await Self.insertEvent("new", receivedAt: "2026-11-10T00:00:00Z", on: pool))
            let cutoff = Self.date("2025-02-28T00:00:00Z")
            // Batches of two: the job goes on until a batch comes back short.
            #expect(try await store.redactPayloads(receivedBefore: cutoff, batchSize: 2, reason: "test", by: "worker-1") == 3)
            #expect(try await store.redactPayloads(receivedBefore: cutoff, batchSize: 2, reason: "test", by: "worker-1") == 0)
            let rows = try await pool.query(
                "SELECT id, signed_payload IS NULL AND payload_key_id IS NULL AS gone, redacted_at IS NOT NULL AS redacted FROM inbound_event")
            var redacted: [Int64] = []
            for row in rows where try row.decode("redacted", as: Bool.self) {
                #expect(try row.decode("gone", as: Bool.self))
                redacted.append(try row.decode("id"))
            }
            #expect(redacted.sorted() == old)
            #expect(Set(kept).isDisjoint(with: redacted))
            // Two audited batches: 2 then 1.
            #expect(try await Self.audits("EVENT_PAYLOADS_REDACTED", on: pool) == 2)
        }
    }

    @Test func severalWorkersRedactEachPayloadOnce() async throws {
        try await Self.withMigratedSchema { pool, store in
            try await pool.query(
                """
                WITH key AS (
                    INSERT INTO inbound_event_key (received_at, notification_uuid, environment)
                    SELECT timestamptz '2025-01-01' + n * interval '1 minute', 'n' || n, 'Sandbox' FROM generate_series(1, 500) AS n
                    RETURNING id, received_at, notification_uuid
                )
                INSERT INTO inbound_event (id, received_at, kind, notification_uuid, notification_type, environment, routing_key,
                                           process_status, signed_payload, payload_key_id)
                SELECT id, received_at, 'notification', notification_uuid, 'DID_RENEW', 'Sandbox', 'o', 'SUCCEEDED', '\\x01', 'k'
                  FROM key
                """)
            let cutoff = Self.date("2026-01-01T00:00:00Z")
            async let first = store.redactPayloads(receivedBefore: cutoff, batchSize: 7, reason: "test", by: "worker-1")
            async let second = store.redactPayloads(receivedBefore: cutoff, batchSize: 7, reason: "test", by: "worker-2")
            let (a, b) = try await (first, second)
            // A worker that finds the lock taken skips the pass; what is left waits for the next one.
            let rest = try await store.redactPayloads(receivedBefore: cutoff, batchSize: 7, reason: "test", by: "worker-1")
            #expect(a + b + rest == 500)
            let audited: Int = try await pool.query(
                "SELECT sum((after->>'redacted')::int)::int AS n FROM audit_log WHERE action = 'EVENT_PAYLOADS_REDACTED'"
            ).first!.decode("n")
            #expect(audited == 500)
        }
    }

    @Test func oldMonthsAreDetachedUnlessEventsAreOnTheirWayAndTheirKeysReleased() async throws {
        try await Self.withMigratedSchema { pool, store in
            #expect(try await store.createPartitions(now: Self.date("2025-01-01T00:00:00Z"), ahead: 3, by: "worker-1").count == 4)
            let january = try await Self.insertEvent("jan", receivedAt: "2025-01-10T00:00:00Z", on: pool)
            try await Self.insertEvent("jan-dead", receivedAt: "2025-01-11T00:00:00Z", status: "DEAD", on: pool)
            try await Self.insertEvent("feb-waiting", receivedAt: "2025-02-10T00:00:00Z", status: "RETRY_WAIT", on: pool)
            try await Self.insertEvent("mar", receivedAt: "2025-03-10T00:00:00Z", on: pool)
            // Months that ended seven months before October: January and February; February still has work.
            let now = Self.date("2025-10-15T00:00:00Z")
            #expect(try await store.detachPartitions(now: now, retentionMonths: 7, by: "worker-1") == ["inbound_event_2025_01"])
            #expect(try await store.detachPartitions(now: now, retentionMonths: 7, by: "worker-1").isEmpty)
            let attached = try await store.partitions().map(\.name)
            #expect(!attached.contains("inbound_event_2025_01"))
            #expect(attached.contains("inbound_event_2025_02") && attached.contains("inbound_event_2025_03"))
            // The month's rows stay in a table of their own; their keys are released.
            #expect(
                try await pool.query("SELECT count(*) AS n FROM inbound_event_detached_2025_01").first!.decode("n", as: Int.self) == 2)
            #expect(try await pool.query("SELECT count(*) AS n FROM inbound_event WHERE id = \(january)").first!.decode("n", as: Int.self) == 0)
            let keys = try await pool.query("SELECT notification_uuid FROM inbound_event_key ORDER BY notification_uuid")
                .map { try $0.decode("notification_uuid", as: String.self) }
            #expect(keys == ["feb-waiting", "mar"])
            #expect(try await Self.audits("EVENT_PARTITION_DETACHED", on: pool) == 1)
            #expect(try await Self.audits("EVENT_PARTITION_KEYS_RELEASED", on: pool) == 1)
        }
    }

    @Test func intakeStaysExactlyOnceAcrossMonths() async throws {
        try await Self.withMigratedSchema { pool, store in
            #expect(try await store.createPartitions(now: Self.date("2025-01-01T00:00:00Z"), ahead: 0, by: "worker-1").count == 1)
            let stored = try await Self.insertEvent("u-old", receivedAt: "2025-01-31T23:59:59Z", on: pool)
            let event = NewNotificationEvent(
                notificationUUID: "u-old", notificationType: "DID_RENEW", environment: "Sandbox", routingKey: "o-u-old")
            let batch = try await store.insertNotifications([event, event])
            #expect(batch.map(\.isNew) == [false, false] && batch.allSatisfy { $0.eventID == stored })
            let single = try await store.insertNotification(event)
            #expect(!single.isNew && single.eventID == stored)
            #expect(try await store.status(ofNotification: "u-old")?.status == "SUCCEEDED")

            let submission = NewSubmission(
                kind: "CLIENT", userID: "alice", orderNo: "order-1", environment: "Sandbox", transactionID: "t1",
                originalTransactionID: "o1", payloadHash: "hash1", sealedPayload: [1], payloadKeyID: "k", traceID: nil)
            let first = try await store.insertSubmission(submission)
            // Moved to last month, as if it had arrived then.
            try await pool.query(
                """
                WITH moved AS (UPDATE inbound_event_key SET received_at = '2025-01-15' WHERE id = \(first.eventID) RETURNING id)
                UPDATE inbound_event SET received_at = '2025-01-15' WHERE id IN (SELECT id FROM moved)
                """)
            let again = try await store.insertSubmission(submission)
            #expect(first.isNew && !again.isNew && again.eventID == first.eventID)
            #expect(try await store.status(of: .submission, id: first.eventID)?.status == "RECEIVED")
            #expect(
                try await pool.query("SELECT count(*) AS n FROM inbound_event").first!.decode("n", as: Int.self) == 2)
        }
    }
}
