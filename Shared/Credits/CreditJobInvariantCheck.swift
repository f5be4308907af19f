import Domain
import Foundation
import Postgres
import ServiceRuntime

extension CreditJobs {
    /// Counts the accounts whose balance differs from their ledger (must be 0) and exposes it.
    @discardableResult
    public func checkInvariant() async throws -> Int {
        let violations = try await pool.withConnection { try await CreditLedger.invariantViolations(on: $0) }
        metrics.ledgerMismatches.set(Double(violations))
        if violations > 0 { logger.error("credit balances differ from their ledgers", ["credits.violations": .int(Int64(violations))]) }
        return violations
    }
}
