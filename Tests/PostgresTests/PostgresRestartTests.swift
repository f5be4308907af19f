import Foundation
import Postgres
import TestSupport
import Testing

/// Server restarts, on a private cluster each: the shared server is never disturbed.
@Suite("PostgreSQL server restarts")
struct PostgresRestartTests {
    @Test func poolReplacesConnectionsBrokenByARestart() async throws {
        try await PrivatePostgres.with { cluster in
            let pool = PostgresPool(
                configuration: PostgresConfiguration(url: cluster.url, maximumConnections: 2), logger: Fixture.logger)
            // Two connections, so that one sits idle through the restart and one is in use.
            let started: String = try await pool.withConnection { first in
                try await pool.withConnection { second in
                    try await second.query("SELECT 1")
                    return try await first.query("SELECT pg_postmaster_start_time()::text AS t").first!.decode("t")
                }
            }
            #expect(pool.statistics == PostgresPoolStatistics(open: 2, idle: 2, waiting: 0))

            try await pool.withConnection { connection in
                try await cluster.restart()
                let error = await #expect(throws: PostgresError.self) { try await connection.query("SELECT 1") }
                #expect(error?.isConnectionFailure == true)
                #expect(error?.isRetryable == true)
            }
            // The broken connection was dropped on return; the idle one is found dead when lent.
            #expect(pool.statistics.open == 1)
            let startTime: PostgresQuery = "SELECT pg_postmaster_start_time()::text AS t"
            let restarted: String
            do {
                restarted = try await pool.query(startTime).first!.decode("t")
            } catch let error as PostgresError where error.isConnectionFailure {
                // Found dead only in use (libpq gave up without the server's goodbye, seen once
                // on a loaded CI machine): that use fails retryably and the session is dropped.
                restarted = try await pool.query(startTime).first!.decode("t")
            } catch {
                Issue.record("after the restart: \(String(reflecting: error))")
                throw error
            }
            #expect(restarted != started)
            #expect(pool.statistics == PostgresPoolStatistics(open: 1, idle: 1, waiting: 0))
            await pool.shutdown()
        }
    }

    @Test func listenerListensAgainAfterARestart() async throws {
        try await PrivatePostgres.with { cluster in
            let pool = PostgresPool(
                configuration: PostgresConfiguration(url: cluster.url, maximumConnections: 2), logger: Fixture.logger)
            let listener = try await pool.listen("events")
            try await pool.notify("events", payload: "before")
            let before = try await Fixture.withDeadline("notification before the restart") { () -> String? in
                for await notification in listener { return notification.payload }
                return nil
            }
            #expect(before == "before")

            try await cluster.restart()
            // Notifications sent before the listener is back are lost by design, so keep sending
            // until one arrives.
            let sender = Task {
                var attempt = 0
                while !Task.isCancelled {
                    attempt += 1
                    try? await pool.notify("events", payload: "after \(attempt)")
                    try? await Task.sleep(for: .milliseconds(50))
                }
            }
            let after = try await Fixture.withDeadline("notification after the restart") { () -> String? in
                for await notification in listener { return notification.payload }
                return nil
            }
            sender.cancel()
            #expect(after?.hasPrefix("after ") == true)
            listener.close()
            await pool.shutdown()
        }
    }
}
