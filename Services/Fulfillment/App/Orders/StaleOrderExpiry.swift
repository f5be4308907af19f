import Domain
import Postgres

/// Closes purchase intents nobody completed: client-created orders (INITIAL, CHANGE) still open
/// after `age` move to EXPIRED, the transition the order state machine allows them, with a
/// status-history row. A real Apple charge arriving later still counts: it completes no open
/// order any more, so it gets a RECOVERY order. Safe with many workers: rows are taken with SKIP
/// LOCKED, and an order a worker is linking right now (locked) is skipped until the next pass.
enum StaleOrderExpiry {
    static let batch = 500

    /// One pass; returns how many orders were expired.
    static func expire(pool: PostgresPool, olderThan age: Duration) async throws -> Int {
        let open = OrderStatus.allCases.filter { $0.isOpen && $0.canMove(to: .expired) }.map(\.rawValue)
        var total = 0
        while true {
            let expired = try await pool.query(
                """
                WITH stale AS (
                    SELECT id, status FROM payment_order
                     WHERE status = ANY(\(PostgresArray(open))::text[]) AND order_type IN ('INITIAL', 'CHANGE')
                       AND created_at < now() - make_interval(secs => \(RetryPolicy.seconds(age)))
                     ORDER BY created_at LIMIT \(batch) FOR UPDATE SKIP LOCKED
                ), moved AS (
                    UPDATE payment_order o SET status = \(OrderStatus.expired.rawValue), updated_at = now()
                      FROM stale WHERE o.id = stale.id
                    RETURNING o.order_no, stale.status AS previous
                )
                INSERT INTO status_history (entity_type, entity_key, previous_status, current_status, cause)
                SELECT 'ORDER', order_no, previous, \(OrderStatus.expired.rawValue), 'order.stale' FROM moved
                """
            ).affectedRows
            total += expired
            if expired < batch { return total }
        }
    }
}
