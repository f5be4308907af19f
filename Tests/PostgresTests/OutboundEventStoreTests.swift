import Domain
import Foundation
import Postgres
import Storage
import TestSupport
import Testing

/// The outbox of outbound events on a real PostgreSQL: each key once, each user's numbers
/// strictly increasing in the order given, other users untouched.
@Suite struct OutboundEventStoreTests {
    static func event(_ key: String, user: String, type: OutboundEventType = .creditsGranted) -> OutboundEvent {
        OutboundEvent(
            key: key, type: type, userID: user, environment: "Sandbox", occurredAt: Date(timeIntervalSince1970: 1_800_000_000),
            data: ["amount": .integer(5), "pool": .string("WELCOME"), "none": .null])
    }

    static func rows(_ pool: PostgresPool) async throws -> [(key: String, user: String, sequence: Int64)] {
        try await pool.query("SELECT event_key, user_id, sequence FROM outbound_event ORDER BY seq").map {
            (try $0.decode("event_key"), try $0.decode("user_id"), try $0.decode("sequence"))
        }
    }

    @Test func eachKeyOnceAndEachUserNumberedInOrder() async throws {
        try await Fixture.withSchema { pool, _ in
            try await Migrator(pool: pool, logger: Fixture.logger).migrate(Migrator.bundled())
            let store = OutboundEventStore(pool: pool)
            let first = try await pool.transaction { db in
                try await store.append(
                    [Self.event("a1", user: "u1"), Self.event("b1", user: "u2"), Self.event("a2", user: "u1"), Self.event("a1", user: "u1")],
                    on: db)
            }
            #expect(first == 3)
            let again = try await pool.transaction { db in
                try await store.append([Self.event("a2", user: "u1"), Self.event("a3", user: "u1")], on: db)
            }
            #expect(again == 1)
            let rows = try await Self.rows(pool)
            #expect(rows.map(\.key) == ["a1", "b1", "a2", "a3"])
            #expect(rows.filter { $0.user == "u1" }.map(\.sequence) == [1, 2, 3])
            #expect(rows.filter { $0.user == "u2" }.map(\.sequence) == [1])
            let data: String = try await pool.query("SELECT data::text AS d FROM outbound_event WHERE event_key = 'a1'")[0].decode("d")
            #expect(data == #"{"none": null, "pool": "WELCOME", "amount": 5}"#)
        }
    }

    @Test func aRolledBackChangeLeavesNoEvent() async throws {
        struct Rollback: Error {}
        try await Fixture.withSchema { pool, _ in
            try await Migrator(pool: pool, logger: Fixture.logger).migrate(Migrator.bundled())
            let store = OutboundEventStore(pool: pool)
            await #expect(throws: Rollback.self) {
                try await pool.transaction { db in
                    try await store.append([Self.event("x", user: "u1")], on: db)
                    throw Rollback()
                }
            }
            #expect(try await Self.rows(pool).isEmpty)
            try await pool.transaction { db in try await store.append([Self.event("x", user: "u1")], on: db) }
            #expect(try await Self.rows(pool).map(\.sequence) == [1])
        }
    }
}
