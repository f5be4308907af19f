import Foundation
import Postgres

/// The months of `inbound_event` (partitioned by month of received_at): partitions created ahead,
/// the sealed payloads of applied events redacted once they are old, whole old months detached.
/// Facts (transactions, renewal infos, grants, ledger) are never touched: the projection is a
/// function of them, not of the events.
///
/// Safe with several workers: every step runs in transactions that first take one transaction
/// advisory lock (a worker that finds it taken skips the step), and each step is idempotent (a
/// partition is created once, a payload redacted once, a month detached once). Every change is
/// audited in the same transaction, under the name of the worker that made it (`actor`).
extension EventStore {
    /// First half of the two-integer transaction advisory lock of every step ("EVRT"); the second
    /// is the schema's hash, so deployments sharing a database in schemas of their own never wait
    /// for each other (as the migrations' lock).
    static let lockClass: Int32 = 0x4556_5254

    /// One monthly partition: its table and the bounds of its month (UTC).
    public struct Partition: Sendable, Hashable {
        public var name: String
        public var month: Date
        /// The first instant of the next month.
        public var end: Date
    }

    /// The attached monthly partitions, oldest first (the default partition is not one of them).
    public func partitions() async throws -> [Partition] {
        try await pool.query(
            """
            SELECT name, m AT TIME ZONE 'UTC' AS month, (m + interval '1 month') AT TIME ZONE 'UTC' AS month_end
              FROM (SELECT c.relname AS name, to_date(right(c.relname, 7), 'YYYY_MM')::timestamp AS m
                      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                     WHERE i.inhparent = 'inbound_event'::regclass AND c.relname ~ '^inbound_event_[0-9]{4}_[0-9]{2}$') AS p
             ORDER BY m
            """
        ).map { Partition(name: try $0.decode("name"), month: try $0.decode("month"), end: try $0.decode("month_end")) }
    }

    /// Creates the missing partitions of the month of `now` and of the `ahead` months after it;
    /// returns the tables created (none when another worker holds the lock).
    public func createPartitions(now: Date, ahead: Int, by actor: String) async throws -> [String] {
        struct Created: Encodable, Sendable {
            var partition: String
            var month: Date
        }
        return try await locked { db in
            // Attaching locks the default partition: give up rather than queue every writer behind a long reader.
            try await db.query("SET LOCAL lock_timeout = '5s'")
            let created = try await db.query(
                """
                SELECT 'inbound_event_' || to_char(m, 'YYYY_MM') AS name, m AT TIME ZONE 'UTC' AS month
                  FROM generate_series(date_trunc('month', \(now)::timestamptz AT TIME ZONE 'UTC'),
                                       date_trunc('month', \(now)::timestamptz AT TIME ZONE 'UTC') + make_interval(months => \(ahead)::int),
                                       interval '1 month') AS m
                 WHERE create_inbound_event_partition(m::date)
                """
            ).map { Created(partition: try $0.decode("name"), month: try $0.decode("month")) }
            for partition in created {
                try await AuditLog(pool: pool).record(
                    on: db, operator: actor, action: "EVENT_PARTITION_CREATED",
                    reason: "partitions are kept \(ahead) months ahead", before: nil, after: partition)
            }
            return created.map(\.partition)
        } ?? []
    }

    /// Redacts, in batches of `batchSize` (one transaction each), the sealed payloads of the
    /// SUCCEEDED events received before `cutoff`: payload and key id become NULL, `redacted_at`
    /// says when. Events still on their way or DEAD keep theirs (a replay needs it). Returns how
    /// many were redacted.
    public func redactPayloads(receivedBefore cutoff: Date, batchSize: Int, reason: String, by actor: String) async throws
        -> Int
    {
        struct Redacted: Encodable, Sendable {
            var receivedBefore: Date
            var redacted: Int
            var firstEventId: Int64?
            var lastEventId: Int64?
        }
        var total = 0
        while let done = try await locked({ db -> Int in
            let row = try await db.query(
                """
                WITH batch AS (
                    SELECT id, received_at FROM inbound_event
                     WHERE received_at < \(cutoff) AND redacted_at IS NULL AND process_status = \(sql: EventStatus.succeeded.literal)
                     ORDER BY received_at LIMIT \(batchSize) FOR UPDATE SKIP LOCKED
                ), redacted AS (
                    UPDATE inbound_event e SET signed_payload = NULL, payload_key_id = NULL, request_body = NULL, redacted_at = now()
                      FROM batch b WHERE e.id = b.id AND e.received_at = b.received_at
                    RETURNING e.id
                )
                SELECT count(*) AS redacted, min(id) AS first, max(id) AS last FROM redacted
                """
            ).single()
            let redacted = Int(try row.decode("redacted", as: Int64.self))
            if redacted > 0 {
                try await AuditLog(pool: pool).record(
                    on: db, operator: actor, action: "EVENT_PAYLOADS_REDACTED", reason: reason, before: nil,
                    after: Redacted(
                        receivedBefore: cutoff, redacted: redacted, firstEventId: try row.decode("first"),
                        lastEventId: try row.decode("last")))
            }
            return redacted
        }) {
            total += done
            if done < batchSize { break }
        }
        return total
    }

    /// Detaches the partitions of the months that ended `retentionMonths` or more months before
    /// the month of `now`, one transaction each, unless one holds events still on their way
    /// (RECEIVED, PROCESSING, RETRY_WAIT: it is left for a later run). A detached month stays as
    /// its own table (`inbound_event_YYYY_MM`, to archive or drop), its events' keys are then
    /// released in batches and it is renamed `inbound_event_detached_YYYY_MM`. Returns the
    /// partitions detached in this call.
    public func detachPartitions(now: Date, retentionMonths: Int, keyBatchSize: Int = 10_000, by actor: String) async throws
        -> [String]
    {
        struct Detached: Encodable, Sendable {
            var partition: String
            var month: Date
        }
        let cutoff: Date = try await pool.query(
            """
            SELECT (date_trunc('month', \(now)::timestamptz AT TIME ZONE 'UTC') - make_interval(months => \(retentionMonths)::int))
                   AT TIME ZONE 'UTC' AS cutoff
            """
        ).single().decode("cutoff")
        var detached: [String] = []
        for partition in try await partitions() where partition.end <= cutoff {
            let done =
                try await locked { db -> Bool in
                    // Detaching needs the parent to itself: give up rather than queue every writer behind a long reader.
                    try await db.query("SET LOCAL lock_timeout = '5s'")
                    guard
                        try await db.query("SELECT detach_inbound_event_partition(\(partition.name)) AS done").single()
                            .decode("done", as: Bool.self)
                    else { return false }
                    try await AuditLog(pool: pool).record(
                        on: db, operator: actor, action: "EVENT_PARTITION_DETACHED",
                        reason: "EVENT_RETENTION_MONTHS=\(retentionMonths)", before: nil,
                        after: Detached(partition: partition.name, month: partition.month))
                    return true
                } ?? false
            if done { detached.append(partition.name) }
        }
        try await releaseDetachedKeys(batchSize: keyBatchSize, by: actor)
        return detached
    }

    /// How many months after the month of `now` have their partition.
    public func monthsAhead(now: Date) async throws -> Int {
        let current: Date = try await pool.query(
            "SELECT date_trunc('month', \(now)::timestamptz AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS current"
        ).single().decode("current")
        return try await partitions().filter { $0.month > current }.count
    }

    /// The key rows of detached months' events, deleted in batches: a month detached is older than
    /// any notification Apple can still send or return (its history reaches 180 days back).
    private func releaseDetachedKeys(batchSize: Int, by actor: String) async throws {
        struct Released: Encodable, Sendable {
            var partition: String
        }
        let pending: [String] = try await pool.query(
            """
            SELECT c.relname AS name FROM pg_class c
             WHERE c.relkind = 'r' AND c.relname ~ '^inbound_event_[0-9]{4}_[0-9]{2}$'
               AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'inbound_event'::regclass)
               AND NOT c.relispartition
            """
        ).map { try $0.decode("name") }
        for name in pending {
            var after: Int64 = 0
            while true {
                let step = try await locked { db -> Int64? in
                    let last: Int64? = try await db.query(
                        "SELECT release_inbound_event_keys(\(name), \(after), \(batchSize)::int) AS last"
                    ).single().decode("last")
                    if last == nil {
                        try await AuditLog(pool: pool).record(
                            on: db, operator: actor, action: "EVENT_PARTITION_KEYS_RELEASED",
                            reason: "the month was detached", before: nil, after: Released(partition: name))
                    }
                    return last
                }
                // Another worker holds the lock, or the month is done.
                guard let step, let last = step else { break }
                after = last
            }
        }
    }

    /// Runs `body` in a transaction holding the retention lock; nil when another worker holds it.
    private func locked<R: Sendable>(_ body: (PostgresConnection) async throws -> R) async throws -> R? {
        try await pool.transaction { db in
            let locked = try await db.query(
                "SELECT pg_try_advisory_xact_lock(\(Self.lockClass), hashtext(coalesce(current_schema(), ''))) AS locked")
            guard try locked[0].decode("locked", as: Bool.self) else { return nil }
            return try await body(db)
        }
    }
}
