import Foundation
import Postgres
import ServiceRuntime
import Testing
import TestSupport

@Suite struct ScratchTests {
    @Test func poolThroughput() async throws {
        let pool = PostgresPool(configuration: PostgresConfiguration(url: try TestEnvironment.databaseURL(), maximumConnections: 16), logger: Logger(label: "x", level: .warning))
        for concurrency in [1, 8] {
            let total = 4000
            let start = ContinuousClock.now
            try await withThrowingTaskGroup(of: Void.self) { group in
                for worker in 0..<concurrency {
                    group.addTask {
                        for _ in 0..<(total / concurrency) { _ = try await pool.query("SELECT \(worker)::int AS x") }
                    }
                }
                try await group.waitForAll()
            }
            let elapsed = ContinuousClock.now - start
            print("select concurrency=\(concurrency) per_second=\(Double(total) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18))")
            let tstart = ContinuousClock.now
            let tx = 1000
            try await withThrowingTaskGroup(of: Void.self) { group in
                for worker in 0..<concurrency {
                    group.addTask {
                        for _ in 0..<(tx / concurrency) {
                            try await pool.transaction { db in
                                for _ in 0..<5 { _ = try await db.query("SELECT \(worker)::int AS x") }
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
            let telapsed = ContinuousClock.now - tstart
            print("tx7 concurrency=\(concurrency) per_second=\(Double(tx) / (Double(telapsed.components.seconds) + Double(telapsed.components.attoseconds) / 1e18))")
        }
        await pool.shutdown()
    }
}
