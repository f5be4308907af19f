import Postgres
import Storage

/// Closes purchase intents nobody completed: client-created orders (INITIAL, CHANGE) still open
/// after `age` move to EXPIRED (`OrderStore.expireStale`). A real Apple charge arriving later
/// still counts: it completes no open order any more, so it gets a RECOVERY order.
enum StaleOrderExpiry {
    static let batch = 500

    /// One pass; returns how many orders were expired.
    static func expire(pool: PostgresPool, olderThan age: Duration) async throws -> Int {
        try await OrderStore(pool: pool).expireStale(olderThan: age, batch: batch)
    }
}
