import Domain
import Foundation
import Postgres

/// The outbox of outbound events (`outbound_event`, `outbound_event_sequence`): every writer of a
/// change the app may act on appends its events here, on its own transaction.
public struct OutboundEventStore: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Appends `events` on the caller's transaction; an event whose key is stored already is left
    /// out (each event once), and so is an event announcing access (`ConsentRescission.announcesAccess`)
    /// to a user whose consent was rescinded at or before it: every writer (the worker, the clock,
    /// an operator's grant) then tells what the read API says. The user's row is read as the
    /// statement starts, unlocked (locking the users of a batch would order writers that never
    /// wait on each other today): an event whose statement started before the rescission committed
    /// is still written, and may be numbered after the rescission's own event. Each user's events get the next numbers of that user's sequence, in
    /// the order given; the user's counter row stays locked until the caller commits, so numbers
    /// follow commit order. Returns how many events were new.
    @discardableResult
    public func append(_ events: [OutboundEvent], on db: PostgresConnection) async throws -> Int {
        guard !events.isEmpty else { return 0 }
        return try await db.query(Self.appendQuery(events)).count
    }

    /// The append as one statement.
    public static func appendQuery(_ events: [OutboundEvent]) -> PostgresQuery {
        "WITH \(fragment: appendCTEs(events)) SELECT seq FROM outbound"
    }

    /// The append as common table expressions for a caller's own top-level `WITH` (`\(fragment:)`;
    /// PostgreSQL allows data-modifying CTEs only there): `outbound_incoming`, `outbound_counted`,
    /// `outbound_numbered` and `outbound`, the last returning the new rows' `seq`.
    public static func appendCTEs(_ events: [OutboundEvent]) -> PostgresQuery {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        // A dictionary of strings, integers and booleans always encodes.
        let data = events.map { String(decoding: try! encoder.encode($0.data), as: UTF8.self) }
        let access = events.map(ConsentRescission.announcesAccess)
        return """
            outbound_incoming AS (
                SELECT DISTINCT ON (x.k) x.k, x.t, x.u, x.e, x.o, x.d, x.ord
                  FROM unnest(\(PostgresArray(events.map(\.key)))::text[], \(PostgresArray(events.map(\.type.rawValue)))::text[],
                              \(PostgresArray(events.map(\.userID)))::text[], \(PostgresArray(events.map(\.environment)))::text[],
                              \(PostgresArray(events.map(\.occurredAt)))::timestamptz[], \(PostgresArray(data))::text[],
                              \(PostgresArray(access))::boolean[])
                       WITH ORDINALITY AS x(k, t, u, e, o, d, a, ord)
                 WHERE NOT EXISTS (SELECT 1 FROM outbound_event oe WHERE oe.event_key = x.k)
                   AND NOT (x.a AND EXISTS (SELECT 1 FROM app_user au WHERE au.user_id = x.u AND au.consent_rescinded_at <= x.o))
                 ORDER BY x.k, x.ord
            ), outbound_counted AS (
                SELECT u, count(*) AS n FROM outbound_incoming GROUP BY u
            ), outbound_numbered AS (
                INSERT INTO outbound_event_sequence AS s (user_id, last_sequence)
                SELECT u, n FROM outbound_counted ORDER BY u
                ON CONFLICT (user_id) DO UPDATE SET last_sequence = s.last_sequence + EXCLUDED.last_sequence
                RETURNING s.user_id, s.last_sequence
            ), outbound AS (
                INSERT INTO outbound_event (event_key, type, user_id, environment, occurred_at, sequence, data)
                SELECT i.k, i.t, i.u, i.e, i.o, b.last_sequence - c.n + row_number() OVER (PARTITION BY i.u ORDER BY i.ord), i.d::jsonb
                  FROM outbound_incoming i JOIN outbound_counted c ON c.u = i.u JOIN outbound_numbered b ON b.user_id = i.u
                 ORDER BY i.ord
                ON CONFLICT (event_key) DO NOTHING
                RETURNING seq
            )
            """
    }
}

/// A stored event as the relay publishes it: `value` is the event's JSON exactly as consumers get
/// it (`{"id","type","occurredAt","userId","sequence","environment","data"}`).
public struct PublishableOutboundEvent: Sendable, Hashable {
    public var seq: Int64
    public var userID: String
    public var value: String
}

extension OutboundEventStore {
    /// Channel of the wake-up a writer sends after committing events, so the relay publishes them
    /// at once instead of at its next sweep.
    public static let channel = "outbound_events"

    /// The one relay at a time (an arbitrary constant of this project): per-user order on the
    /// topic needs a single publisher of a user's events.
    static let relayLockKey: Int64 = 0x0E7E_0B0B_5E0E

    /// In one transaction holding the relay's lock: the oldest committed unpublished events (by
    /// `seq`, so each user's in sequence order), handed to `publish`, which returns the `seq`s the
    /// broker acknowledged; those are marked published. Nil when another relay holds the lock.
    ///
    /// A user's events commit in their sequence order (the counter row is locked until commit),
    /// so an event visible here has every earlier event of its user visible or published.
    public func relay(
        limit: Int, _ publish: @Sendable ([PublishableOutboundEvent]) async -> [Int64]
    ) async throws -> Int? {
        try await pool.transaction { db in
            // The mark need not wait for the disk: lost in a crash, the events are sent again
            // (delivery is at least once) and the pass does not hold its lock through a flush.
            let locked = try await db.query(
                "SELECT set_config('synchronous_commit', 'off', true), pg_try_advisory_xact_lock(\(Self.relayLockKey)) AS locked")
            guard try locked.single().decode("locked", as: Bool.self) else { return nil }
            let rows = try await db.query(
                """
                SELECT seq, user_id,
                       json_build_object(
                           'id', id, 'type', type,
                           'occurredAt', to_char(occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                           'userId', user_id, 'sequence', sequence, 'environment', environment, 'data', data)::text AS value
                  FROM outbound_event WHERE published_at IS NULL ORDER BY seq LIMIT \(limit)
                """)
            let events = try rows.map {
                PublishableOutboundEvent(seq: try $0.decode("seq"), userID: try $0.decode("user_id"), value: try $0.decode("value"))
            }
            guard !events.isEmpty else { return 0 }
            let acknowledged = await publish(events)
            if !acknowledged.isEmpty {
                try await db.query(
                    "UPDATE outbound_event SET published_at = now() WHERE seq = ANY(\(PostgresArray(acknowledged))::bigint[])")
            }
            return acknowledged.count
        }
    }

    /// Wakes the relays (`channel`); sent after the commit, outside the writer's transaction.
    public func announce() async throws { try await pool.notify(Self.channel, payload: "") }

    /// Unpublished events and the age of the oldest in seconds (0 when none): the relay's backlog.
    public func backlog() async throws -> (count: Int, oldestSeconds: Double) {
        let row = try await pool.query(
            """
            SELECT count(*) AS n, coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS age
              FROM outbound_event WHERE published_at IS NULL
            """
        ).single()
        return (try row.decode("n"), try row.decode("age"))
    }
}
