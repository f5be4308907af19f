import Domain
import Foundation
import Postgres
import ServiceRuntime

extension CreditJobs {
    /// Counts the accounts whose balance differs from their ledger (must be 0), stores the result
    /// for the other workers and exposes it.
    @discardableResult
    public func checkInvariant() async throws -> Int {
        let violations = try await pool.withConnection { try await ledger.invariantViolations(on: $0) }
        try await pool.query("UPDATE credit_invariant_check SET checked_at = now(), violations = \(violations)")
        report(violations)
        return violations
    }

    /// The check once per `interval` across all workers: the worker that claims the stored check
    /// after the interval has passed runs it (a claim whose check fails is retried an interval
    /// later); the others expose the stored result. Returns the violations exposed.
    @discardableResult
    public func checkInvariantIfDue(interval: Duration) async throws -> Int {
        // An upsert, so that a missing row (deleted by hand) is a claim, not a check that never runs.
        let claimed = try await pool.query(
            """
            INSERT INTO credit_invariant_check AS c DEFAULT VALUES
            ON CONFLICT (singleton) DO UPDATE SET checked_at = now()
             WHERE c.checked_at <= now() - make_interval(secs => \(interval.inSeconds))
            RETURNING c.violations
            """)
        if !claimed.isEmpty { return try await checkInvariant() }
        let stored: Int = try await pool.query("SELECT violations FROM credit_invariant_check")[0].decode("violations")
        report(stored)
        return stored
    }

    private func report(_ violations: Int) {
        metrics.ledgerMismatches.set(Double(violations))
        if violations > 0 { logger.error("credit balances differ from their ledgers", ["credits.violations": .int(Int64(violations))]) }
    }
}
