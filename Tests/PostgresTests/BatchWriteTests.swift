import Foundation
import Postgres
import Storage
import Testing

/// Binary parameters and the intake's one-statement batch insert.
@Suite("PostgreSQL batch writes")
struct BatchWriteTests {
    @Test func byteaValuesAndArraysTravelInBinaryFormat() async throws {
        try await Fixture.withSchema { pool, _ in
            let payloads: [[UInt8]?] = [[0, 1, 0x5C, 0x78, 255], nil, [], Array(repeating: 0xAB, count: 70_000)]
            let rows = try await pool.query(
                """
                SELECT p, p IS NULL AS missing, position
                  FROM unnest(\(PostgresArray(payloads))::bytea[]) WITH ORDINALITY AS u(p, position) ORDER BY position
                """)
            #expect(try rows.map { try $0.decode("p", as: [UInt8]?.self) } == payloads)
            // An empty value is an empty bytea, never NULL.
            let empty = try #require(try await pool.query("SELECT \([UInt8]()) IS NULL AS missing, length(\([UInt8]())) AS n").first)
            #expect(try empty.decode("missing", as: Bool.self) == false)
            #expect(try empty.decode("n", as: Int.self) == 0)
            #expect(try await pool.query("SELECT cardinality(\(PostgresArray<[UInt8]>([]))::bytea[]) AS n").first?.decode("n", as: Int.self) == 0)
        }
    }

    @Test func notificationBatchInsertsOnceAndReportsDuplicatesInOrder() async throws {
        try await Fixture.withSchema { pool, _ in
            try await Migrator(pool: pool, logger: Fixture.logger).migrate(try Migrator.bundled())
            let store = EventStore(pool: pool, topic: "t")
            func event(_ uuid: String, payload: [UInt8]) -> NewNotificationEvent {
                NewNotificationEvent(
                    notificationUUID: uuid, notificationType: "DID_RENEW", subtype: uuid == "a" ? nil : "BILLING_RECOVERY",
                    environment: "Sandbox", signedDate: Date(timeIntervalSince1970: 1_700_000_000.5), transactionID: "t-\(uuid)",
                    originalTransactionID: "o-\(uuid)", routingKey: "o-\(uuid)", sealedPayload: payload, payloadKeyID: "k1",
                    traceID: "trace-\(uuid)")
            }
            let first = try await store.insertNotifications([
                event("a", payload: [1, 2, 3]), event("b", payload: [4]), event("a", payload: [9]),
            ])
            #expect(first.map(\.isNew) == [true, true, false])
            #expect(first[2].eventID == first[0].eventID && first[2].outbox == nil)
            #expect(first[0].outbox?.routingKey == "o-a" && first[1].outbox?.routingKey == "o-b")

            let second = try await store.insertNotifications([event("b", payload: [5]), event("c", payload: [6])])
            #expect(second.map(\.isNew) == [false, true])
            #expect(second[0].eventID == first[1].eventID)

            let rows = try await pool.query(
                "SELECT notification_uuid, subtype, signed_payload, signed_date FROM inbound_event WHERE kind = 'notification' ORDER BY id")
            #expect(try rows.map { try $0.decode("notification_uuid", as: String.self) } == ["a", "b", "c"])
            #expect(try rows.map { try $0.decode("signed_payload", as: [UInt8].self) } == [[1, 2, 3], [4], [6]])
            #expect(try rows.map { try $0.decode("subtype", as: String?.self) } == [nil, "BILLING_RECOVERY", "BILLING_RECOVERY"])
            #expect(try rows[0].decode("signed_date", as: Date.self) == Date(timeIntervalSince1970: 1_700_000_000.5))
            let outbox = try await pool.query("SELECT event_id FROM event_outbox ORDER BY event_id")
            #expect(
                try outbox.map { try $0.decode("event_id", as: Int64.self) }
                    == [first[0].eventID, first[1].eventID, second[1].eventID])
        }
    }
}
