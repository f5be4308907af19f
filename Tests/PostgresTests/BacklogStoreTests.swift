import Foundation
import Postgres
import Storage
import TestSupport
import Testing

/// The backlog gauges read from a real PostgreSQL: each count and age against rows made for it,
/// and the sampler's lock held by one session at a time. A migrated schema each (no CREATE
/// DATABASE: its forced checkpoints stall a loaded server).
@Suite struct BacklogStoreTests {
    struct Schema {
        let pool: PostgresPool
    }

    static func withMigratedSchema(_ body: (Schema) async throws -> Void) async throws {
        try await Fixture.withSchema { pool, _ in
            try await Migrator(pool: pool, logger: Fixture.logger).migrate(Migrator.bundled())
            try await body(Schema(pool: pool))
        }
    }

    @Test func anEmptyDatabaseHasNoBacklog() async throws {
        try await Self.withMigratedSchema { database in
            let sample = try await database.pool.withConnection { try await BacklogStore().sample(on: $0) }
            #expect(sample.outboxMessages == 0 && sample.outboxOldestAge == 0)
            #expect(sample.eventsByStatus == ["RECEIVED": 0, "PROCESSING": 0, "RETRY_WAIT": 0, "DEAD": 0])
            #expect(sample.oldestAgeByStatus == ["RECEIVED": 0, "RETRY_WAIT": 0])
            #expect(sample.newestProductionNotificationAge == nil)
            #expect(sample.overdueDailyBills == 0 && sample.dailyCloseDelay == 0)
            #expect(sample.deadByErrorCode.isEmpty && sample.unmatchedByReason.isEmpty && sample.tasks.isEmpty)
        }
    }

    @Test func everyBacklogIsCountedFromItsRows() async throws {
        try await Self.withMigratedSchema { database in
            try await database.pool.query(
                PostgresQuery(
                    unsafeSQL: """
                        WITH e (id, notification_uuid, environment, routing_key, process_status, error_code, received_at) AS (
                            VALUES (1, 'n1', 'Sandbox', 'o1', 'RECEIVED', NULL, now() - interval '10 minutes'),
                                   (2, 'n2', 'Sandbox', 'o2', 'RECEIVED', NULL, now() - interval '1 minute'),
                                   (3, 'n3', 'Production', 'o3', 'RETRY_WAIT', NULL, now() - interval '2 hours'),
                                   (4, 'n4', 'Production', 'o4', 'SUCCEEDED', NULL, now() - interval '30 minutes'),
                                   (5, 'n5', 'Sandbox', 'o5', 'SUCCEEDED', NULL, now() - interval '1 second'),
                                   (6, 'n6', 'Sandbox', 'o6', 'DEAD', 'UNMATCHED_PRODUCT', now()),
                                   (7, 'n7', 'Sandbox', 'o7', 'DEAD', 'UNMATCHED_PRODUCT', now()),
                                   (8, 'n8', 'Sandbox', 'o8', 'DEAD', 'SANDBOX_REFUSED', now()),
                                   (9, 'n9', 'Sandbox', 'o9', 'PROCESSING', NULL, now())
                        ), key AS (
                            INSERT INTO inbound_event_key (id, received_at, notification_uuid, environment)
                            SELECT id, received_at, notification_uuid, environment FROM e
                        )
                        INSERT INTO inbound_event (id, kind, notification_uuid, notification_type, environment, routing_key,
                                                   process_status, error_code, received_at)
                        SELECT id, 'notification', notification_uuid, 'DID_RENEW', environment, routing_key, process_status,
                               error_code, received_at
                          FROM e;
                        INSERT INTO event_outbox (event_kind, event_id, topic, routing_key, created_at)
                        VALUES ('notification', 1, 't', 'o1', now() - interval '5 minutes'), ('notification', 2, 't', 'o2', now());
                        INSERT INTO unmatched_fact (event_kind, event_id, reason, environment, replayed_at)
                        VALUES ('notification', 6, 'UNMATCHED_PRODUCT', 'Sandbox', NULL),
                               ('notification', 7, 'UNMATCHED_PRODUCT', 'Sandbox', now()),
                               ('notification', 8, 'UNMATCHED_ACCOUNT', 'Sandbox', NULL);
                        INSERT INTO fulfillment_task (kind, environment, original_transaction_id, reason, requested_by, status)
                        VALUES ('REQUERY', 'Production', 'o1', 'test', 'test', 'PENDING'),
                               ('REQUERY', 'Production', 'o2', 'test', 'test', 'DONE'),
                               ('REQUERY', 'Production', 'o3', 'test', 'test', 'DONE');
                        INSERT INTO app_user (user_id) VALUES ('alice'), ('bob');
                        INSERT INTO credit_daily_bill (user_id, day, closed_at)
                        VALUES ('alice', (now() AT TIME ZONE 'UTC')::date - 3, NULL),
                               ('bob', (now() AT TIME ZONE 'UTC')::date - 1, NULL),
                               ('bob', (now() AT TIME ZONE 'UTC')::date - 2, now()),
                               ('alice', (now() AT TIME ZONE 'UTC')::date, NULL);
                        """))
            let sample = try await database.pool.withConnection { try await BacklogStore().sample(on: $0) }
            #expect(sample.outboxMessages == 2)
            #expect((299...330).contains(sample.outboxOldestAge), "\(sample.outboxOldestAge)")
            #expect(sample.eventsByStatus == ["RECEIVED": 2, "PROCESSING": 1, "RETRY_WAIT": 1, "DEAD": 3])
            #expect((599...630).contains(sample.oldestAgeByStatus["RECEIVED"]!))
            #expect((7199...7230).contains(sample.oldestAgeByStatus["RETRY_WAIT"]!))
            // The newest Production notification, whatever its status; Sandbox ones do not count.
            #expect((1799...1830).contains(sample.newestProductionNotificationAge ?? -1))
            #expect(sample.deadByErrorCode == ["UNMATCHED_PRODUCT": 2, "SANDBOX_REFUSED": 1])
            // A replayed fact no longer waits.
            #expect(sample.unmatchedByReason == ["UNMATCHED_PRODUCT": 1, "UNMATCHED_ACCOUNT": 1])
            #expect(
                sample.tasks == [
                    BacklogSample.TaskKey(kind: "REQUERY", status: "PENDING"): 1, BacklogSample.TaskKey(kind: "REQUERY", status: "DONE"): 2,
                ])
            // Two open bills of past days (today's is still running); the oldest day ended two days ago.
            #expect(sample.overdueDailyBills == 2)
            #expect((2 * 86_400 - 1...3 * 86_400).contains(sample.dailyCloseDelay), "\(sample.dailyCloseDelay)")
        }
    }

    @Test func oneSessionAtATimeLeadsTheSampling() async throws {
        try await Self.withMigratedSchema { database in
            let store = BacklogStore()
            try await database.pool.withConnection { first in
                #expect(try await store.tryLead(on: first))
                try await database.pool.withConnection { second in
                    #expect(try await !store.tryLead(on: second))
                    try await store.resign(on: first)
                    #expect(try await store.tryLead(on: second))
                    try await store.resign(on: second)
                }
            }
        }
    }
}
