import Foundation
import Postgres
import TestSupport
import Testing

@Suite("PostgreSQL LISTEN/NOTIFY")
struct PostgresListenerTests {
    @Test func notificationsArriveInOrderUntilClosed() async throws {
        try await Fixture.withSchema { pool, _ in
            let channel = TestEnvironment.uniqueName("Chan")
            let listener = try await pool.listen(channel)
            let payloads = ["first", "it's \"quoted\" ☃", ""]
            for payload in payloads { try await pool.notify(channel, payload: payload) }
            // Another channel's notifications do not leak in.
            try await pool.notify(channel + "_other", payload: "elsewhere")
            let received = try await Fixture.withDeadline("three notifications") {
                var received: [PostgresNotification] = []
                for await notification in listener {
                    received.append(notification)
                    if received.count == payloads.count { break }
                }
                return received
            }
            #expect(received == payloads.map { PostgresNotification(channel: channel, payload: $0) })
            listener.close()
            let rest = try await Fixture.withDeadline("sequence end after close") {
                var rest: [PostgresNotification] = []
                for await notification in listener { rest.append(notification) }
                return rest
            }
            #expect(rest.isEmpty)
        }
    }

    @Test func notificationsOfARolledBackTransactionAreNotDelivered() async throws {
        try await Fixture.withSchema { pool, _ in
            let channel = TestEnvironment.uniqueName("chan")
            let listener = try await pool.listen(channel)
            await #expect(throws: Boom.self) {
                try await pool.transaction { connection in
                    try await connection.query("SELECT pg_notify(\(channel), 'rolled back')")
                    throw Boom()
                }
            }
            try await pool.transaction { connection in
                try await connection.query("SELECT pg_notify(\(channel), 'committed')")
            }
            let first = try await Fixture.withDeadline("a notification") { () -> String? in
                for await notification in listener { return notification.payload }
                return nil
            }
            #expect(first == "committed")
            listener.close()
        }
    }
}
