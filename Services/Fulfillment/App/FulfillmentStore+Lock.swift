import Postgres
import Storage

extension FulfillmentStore {
    /// Locks the event rows whose lease is still ours, then their chains; returns the positions held.
    /// A chain lock is a transaction advisory lock on "environment/originalTransactionId": it also
    /// covers a chain with no row yet. Event rows are locked before any chain, and chains in sorted
    /// order, so two workers never hold one lock each while waiting for the other's. It is its own
    /// statement so the next statement's snapshot sees everything the previous holders committed.
    /// Ids are one space across kinds and the claim checked the kind, so the id alone names the row;
    /// its key row names its month's partition. The lease test is a CASE, as in the claim: with
    /// `process_status = 'PROCESSING'` the transaction's generic plan read every month's
    /// PROCESSING rows (the lease index) and hashed them against the batch, a cost that grows with
    /// the events in flight; the CASE leaves the keys as the only way in.
    func lock(_ batch: [PendingEvent], owner: String, on db: PostgresConnection) async throws -> Set<Int> {
        let rows = try await db.query(
            """
            WITH leased AS MATERIALIZED (
                SELECT e.id FROM inbound_event_key k JOIN inbound_event e ON e.id = k.id AND e.received_at = k.received_at
                 WHERE k.id = ANY(\(PostgresArray(batch.map(\.event.id)))::bigint[])
                   AND CASE e.process_status WHEN \(sql: EventStatus.processing.literal) THEN e.lease_owner = \(owner) ELSE false END
                   FOR UPDATE OF e
            ), held AS MATERIALIZED (
                SELECT e.position, e.chain
                  FROM unnest(\(PostgresArray(batch.map(\.event.id)))::bigint[],
                              \(PostgresArray(batch.map(\.chain)))::text[]) WITH ORDINALITY AS e(id, chain, position)
                 WHERE e.id IN (SELECT id FROM leased)
            ), chain_lock AS MATERIALIZED (
                SELECT pg_advisory_xact_lock(hashtextextended(c.chain, 0))
                  FROM (SELECT DISTINCT chain FROM held WHERE chain IS NOT NULL ORDER BY chain OFFSET 0) AS c
            )
            SELECT position FROM held WHERE (SELECT count(*) FROM chain_lock) >= 0
            """)
        return Set(try rows.map { Int(try $0.decode("position", as: Int64.self)) - 1 })
    }
}
