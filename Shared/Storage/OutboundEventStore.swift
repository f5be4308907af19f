import Domain
import Foundation
import Postgres

/// The outbox of outbound events (`outbound_event`, `outbound_event_sequence`): every writer of a
/// change the app may act on appends its events here, on its own transaction.
public struct OutboundEventStore: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Appends `events` on the caller's transaction; an event whose key is stored already is left
    /// out (each event once). Each user's events get the next numbers of that user's sequence, in
    /// the order given; the user's counter row stays locked until the caller commits, so numbers
    /// follow commit order. Returns how many events were new.
    @discardableResult
    public func append(_ events: [OutboundEvent], on db: PostgresConnection) async throws -> Int {
        guard !events.isEmpty else { return 0 }
        return try await db.query(Self.appendQuery(events)).count
    }

    /// The append as one statement, for a caller that composes it into its own (`\(fragment:)`).
    public static func appendQuery(_ events: [OutboundEvent]) -> PostgresQuery {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        // A dictionary of strings, integers and booleans always encodes.
        let data = events.map { String(decoding: try! encoder.encode($0.data), as: UTF8.self) }
        return """
            WITH incoming AS (
                SELECT DISTINCT ON (x.k) x.k, x.t, x.u, x.e, x.o, x.d, x.ord
                  FROM unnest(\(PostgresArray(events.map(\.key)))::text[], \(PostgresArray(events.map(\.type.rawValue)))::text[],
                              \(PostgresArray(events.map(\.userID)))::text[], \(PostgresArray(events.map(\.environment)))::text[],
                              \(PostgresArray(events.map(\.occurredAt)))::timestamptz[], \(PostgresArray(data))::text[])
                       WITH ORDINALITY AS x(k, t, u, e, o, d, ord)
                 WHERE NOT EXISTS (SELECT 1 FROM outbound_event oe WHERE oe.event_key = x.k)
                 ORDER BY x.k, x.ord
            ), counted AS (
                SELECT u, count(*) AS n FROM incoming GROUP BY u
            ), numbered AS (
                INSERT INTO outbound_event_sequence AS s (user_id, last_sequence)
                SELECT u, n FROM counted ORDER BY u
                ON CONFLICT (user_id) DO UPDATE SET last_sequence = s.last_sequence + EXCLUDED.last_sequence
                RETURNING s.user_id, s.last_sequence
            )
            INSERT INTO outbound_event (event_key, type, user_id, environment, occurred_at, sequence, data)
            SELECT i.k, i.t, i.u, i.e, i.o, b.last_sequence - c.n + row_number() OVER (PARTITION BY i.u ORDER BY i.ord), i.d::jsonb
              FROM incoming i JOIN counted c ON c.u = i.u JOIN numbered b ON b.user_id = i.u
             ORDER BY i.ord
            ON CONFLICT (event_key) DO NOTHING
            RETURNING seq
            """
    }
}
