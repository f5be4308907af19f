import Foundation
import Postgres

extension Subsctl {
    /// Runs `body` with a one-connection pool on `DATABASE_URL` and returns its exit status; database
    /// trouble becomes the exit status an operator's script can act on (retry later, fix set-up).
    static func withDatabase(_ body: (PostgresPool) async throws -> Int32) async -> Int32 {
        guard let url = environment["DATABASE_URL"], !url.isEmpty else {
            printError("DATABASE_URL is not set")
            return ExitStatus.configuration
        }
        let pool = PostgresPool(configuration: PostgresConfiguration(url: url, maximumConnections: 1), logger: logger)
        let status: Int32
        do {
            status = try await body(pool)
        } catch let error as PostgresError where error.sqlState == .undefinedTable {
            printError("the database schema is not there yet (\(error)): run `subsctl migrate` first")
            status = ExitStatus.configuration
        } catch let error as PostgresError where error.isRetryable {
            printError("database unavailable, nothing changed: \(error)")
            status = ExitStatus.temporaryFailure
        } catch {
            printError("refused: \(error)")
            status = ExitStatus.refused
        }
        await pool.shutdown()
        return status
    }
}
