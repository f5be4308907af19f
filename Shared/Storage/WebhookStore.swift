import Foundation
import Postgres
import ServiceRuntime

/// The SQL of `webhook_endpoint` and `webhook_delivery`: the endpoints operators register, and the
/// delivery of each outbound event to each matching endpoint, claimed by the senders under leases.
///
/// Secrets arrive sealed (the callers hold the cipher): this store never sees one in clear.
public struct WebhookStore: Sendable {
    /// A delivery's state: waiting for its first attempt, waiting after a failure, done, given up.
    public enum Status: String, Sendable, Codable, CaseIterable {
        case pending = "PENDING"
        case retrying = "RETRYING"
        case delivered = "DELIVERED"
        case dead = "DEAD"
    }

    /// Whom an endpoint's deliveries are for: an operator's webhook (outbound events), or a target
    /// of Apple's notifications forwarded as they came (`APPLE_NOTIFICATION_FORWARD_URL`).
    public enum EndpointKind: String, Sendable {
        case webhook = "WEBHOOK"
        case appleForward = "APPLE_FORWARD"
    }

    /// A secret as stored: sealed under a payload key, bound to the endpoint's id.
    public struct SealedSecret: Sendable, Equatable {
        public var keyID: String
        public var sealed: [UInt8]

        public init(keyID: String, sealed: [UInt8]) {
            self.keyID = keyID
            self.sealed = sealed
        }
    }

    /// An endpoint as registered; its secrets sealed.
    public struct Endpoint: Sendable, Equatable {
        public var id: String
        public var url: String
        /// Nil: every type.
        public var eventTypes: [String]?
        /// Nil: every environment.
        public var environments: [String]?
        public var description: String?
        public var secret: SealedSecret
        /// The secret the last rotation replaced, while it still signs.
        public var previousSecret: SealedSecret?
        public var previousSecretExpiresAt: Date?
        public var createdAt: Date
        public var deletedAt: Date?

        public init(
            id: String, url: String, eventTypes: [String]?, environments: [String]?, description: String?,
            secret: SealedSecret, previousSecret: SealedSecret? = nil, previousSecretExpiresAt: Date? = nil,
            createdAt: Date = Date(), deletedAt: Date? = nil
        ) {
            self.id = id
            self.url = url
            self.eventTypes = eventTypes
            self.environments = environments
            self.description = description
            self.secret = secret
            self.previousSecret = previousSecret
            self.previousSecretExpiresAt = previousSecretExpiresAt
            self.createdAt = createdAt
            self.deletedAt = deletedAt
        }
    }

    /// One delivery as the admin API shows it.
    public struct Delivery: Sendable, Equatable, Codable {
        public var seq: Int64
        public var eventId: String
        public var type: String
        public var status: Status
        public var attempts: Int
        public var lastStatusCode: Int?
        public var lastError: String?
        public var nextAttemptAt: Date?
    }

    /// A delivery a sender claimed: what to send, where, and the endpoint's sealed secrets.
    public struct Claim: Sendable {
        public var seq: Int64
        public var endpointID: String
        public var url: String
        public var eventID: String
        public var payload: [UInt8]
        /// The attempts made before this one.
        public var attempts: Int
        public var createdAt: Date
        public var secret: SealedSecret
        /// Present while the rotation's overlap lasts (by the database's clock).
        public var previousSecret: SealedSecret?
    }

    /// How one attempt ended.
    public struct Outcome: Sendable {
        public var seq: Int64
        public var delivered: Bool
        public var statusCode: Int?
        public var error: String?
        /// When a failed delivery is tried again; ignored when delivered or given up.
        public var retryAfter: Duration
        /// Whether a failure is the last allowed attempt (the delivery becomes DEAD).
        public var final: Bool

        public init(seq: Int64, delivered: Bool, statusCode: Int?, error: String?, retryAfter: Duration, final: Bool) {
            self.seq = seq
            self.delivered = delivered
            self.statusCode = statusCode
            self.error = error
            self.retryAfter = retryAfter
            self.final = final
        }
    }

    /// What `record` changed, for the metrics.
    public struct Recorded: Sendable, Equatable {
        public var delivered = 0
        public var retrying = 0
        public var dead = 0
        /// Seconds from each delivered row's first read to its delivery.
        public var deliveredLatencies: [Double] = []
        /// The forwards of Apple's notifications among them, counted apart from the webhooks above
        /// (their alerts differ: a dead forward is a notification another back end never got).
        public var forwards = Forwards()
    }

    /// What `record` changed among the forwards of Apple's notifications.
    public struct Forwards: Sendable, Equatable {
        public var delivered = 0
        public var retrying = 0
        public var dead = 0
    }

    public let pool: PostgresPool
    let audit: AuditLog

    public init(pool: PostgresPool) {
        self.pool = pool
        audit = AuditLog(pool: pool)
    }

    static let endpointColumns: StaticString = """
        id, url, array_to_string(event_types, ' ') AS event_types, array_to_string(environments, ' ') AS environments,
        description, secret_key_id, secret_sealed, previous_secret_key_id, previous_secret_sealed,
        previous_secret_expires_at, created_at, deleted_at
        """

    // MARK: Endpoints

    /// Registers an endpoint, with its audit row.
    public func create(_ endpoint: Endpoint, operator operatorName: String) async throws {
        try await pool.transaction { db in
            try await db.query(
                """
                INSERT INTO webhook_endpoint (id, url, event_types, environments, description, secret_key_id, secret_sealed)
                VALUES (\(endpoint.id), \(endpoint.url), \(endpoint.eventTypes.map { PostgresArray($0) })::text[],
                        \(endpoint.environments.map { PostgresArray($0) })::text[], \(endpoint.description),
                        \(endpoint.secret.keyID), \(endpoint.secret.sealed))
                """)
            try await audit.record(
                on: db, operator: operatorName, action: "webhook.create", reason: "webhook endpoint registered", before: nil,
                after: AuditState(endpoint))
        }
    }

    /// The endpoint, deleted or not; nil when no endpoint has this id.
    public func endpoint(_ id: String) async throws -> Endpoint? {
        try await pool.query("SELECT \(sql: Self.endpointColumns) FROM webhook_endpoint WHERE id = \(id)").first.map(Self.endpoint)
    }

    /// The endpoints not deleted, oldest first.
    public func endpoints() async throws -> [Endpoint] {
        try await pool.query(
            "SELECT \(sql: Self.endpointColumns) FROM webhook_endpoint WHERE deleted_at IS NULL AND kind = 'WEBHOOK' ORDER BY created_at, id"
        ).map(Self.endpoint)
    }

    /// Deletes an endpoint (it gets nothing new; its deliveries stay readable); false when there is
    /// no such endpoint or it was deleted already.
    public func delete(_ id: String, operator operatorName: String, reason: String) async throws -> Bool {
        try await pool.transaction { db in
            let rows = try await db.query(
                """
                UPDATE webhook_endpoint SET deleted_at = now() WHERE id = \(id) AND deleted_at IS NULL
                RETURNING \(sql: Self.endpointColumns)
                """)
            guard let row = rows.first else { return false }
            try await audit.record(
                on: db, operator: operatorName, action: "webhook.delete", reason: reason, before: AuditState(try Self.endpoint(row)),
                after: nil)
            return true
        }
    }

    /// Replaces the secret; the one replaced keeps signing until `overlap` has passed. False when
    /// the endpoint does not exist or is deleted.
    public func rotate(_ id: String, to secret: SealedSecret, overlap: Duration, operator operatorName: String, reason: String)
        async throws -> Bool
    {
        try await pool.transaction { db in
            let rows = try await db.query(
                """
                UPDATE webhook_endpoint
                   SET previous_secret_key_id = secret_key_id, previous_secret_sealed = secret_sealed,
                       previous_secret_expires_at = now() + make_interval(secs => \(overlap.inSeconds)),
                       secret_key_id = \(secret.keyID), secret_sealed = \(secret.sealed)
                 WHERE id = \(id) AND deleted_at IS NULL
                RETURNING \(sql: Self.endpointColumns)
                """)
            guard let row = rows.first else { return false }
            try await audit.record(
                on: db, operator: operatorName, action: "webhook.rotate-secret", reason: reason, before: nil,
                after: AuditState(try Self.endpoint(row)))
            return true
        }
    }

    /// What the audit trail keeps of an endpoint: never its secrets.
    struct AuditState: Encodable, Sendable {
        let id: String
        let url: String
        let eventTypes: [String]?
        let environments: [String]?
        let description: String?
        let previousSecretExpiresAt: Date?

        init(_ endpoint: Endpoint) {
            id = endpoint.id
            url = endpoint.url
            eventTypes = endpoint.eventTypes
            environments = endpoint.environments
            description = endpoint.description
            previousSecretExpiresAt = endpoint.previousSecretExpiresAt
        }
    }

    static func endpoint(_ row: PostgresRow) throws -> Endpoint {
        func list(_ column: String) throws -> [String]? {
            try row.decode(column, as: String?.self).map { $0.split(separator: " ").map(String.init) }
        }
        let previousKey = try row.decode("previous_secret_key_id", as: String?.self)
        let previousSealed = try row.decode("previous_secret_sealed", as: [UInt8]?.self)
        return Endpoint(
            id: try row.decode("id"), url: try row.decode("url"), eventTypes: try list("event_types"),
            environments: try list("environments"), description: try row.decode("description"),
            secret: SealedSecret(keyID: try row.decode("secret_key_id"), sealed: try row.decode("secret_sealed")),
            previousSecret: previousKey.flatMap { key in previousSealed.map { SealedSecret(keyID: key, sealed: $0) } },
            previousSecretExpiresAt: try row.decode("previous_secret_expires_at"), createdAt: try row.decode("created_at"),
            deletedAt: try row.decode("deleted_at"))
    }

    // MARK: Deliveries

    /// An event read from the outbound topic, to be delivered.
    public struct IncomingEvent: Sendable {
        public var id: String
        public var type: String
        public var environment: String
        /// The event as read: every attempt sends these bytes.
        public var payload: [UInt8]

        public init(id: String, type: String, environment: String, payload: [UInt8]) {
            self.id = id
            self.type = type
            self.environment = environment
            self.payload = payload
        }
    }

    /// Adds a PENDING delivery of each event to every live endpoint of `kind` whose filters take it,
    /// in one statement; an endpoint that has the event already gets nothing new (the event read
    /// again). Returns the rows added.
    @discardableResult
    public func enqueue(_ events: [IncomingEvent], kind: EndpointKind = .webhook) async throws -> Int {
        guard !events.isEmpty else { return 0 }
        return try await pool.query(
            """
            INSERT INTO webhook_delivery (endpoint_id, event_id, type, payload)
            SELECT e.id, x.id, x.type, x.payload
              FROM unnest(\(PostgresArray(events.map(\.id)))::text[], \(PostgresArray(events.map(\.type)))::text[],
                          \(PostgresArray(events.map(\.environment)))::text[], \(PostgresArray(events.map(\.payload)))::bytea[])
                   AS x(id, type, environment, payload)
              JOIN webhook_endpoint e
                ON e.deleted_at IS NULL AND e.kind = \(kind.rawValue)
               AND (e.event_types IS NULL OR x.type = ANY (e.event_types))
               AND (e.environments IS NULL OR x.environment = ANY (e.environments))
            ON CONFLICT (endpoint_id, event_id) DO NOTHING
            RETURNING seq
            """
        ).count
    }

    /// One event's `enqueue`.
    @discardableResult
    public func enqueue(eventID: String, type: String, environment: String, payload: [UInt8]) async throws -> Int {
        try await enqueue([IncomingEvent(id: eventID, type: type, environment: environment, payload: payload)])
    }

    /// Leases up to `limit` due deliveries of live endpoints to `owner` for `lease`, at most
    /// `perEndpoint` in flight per endpoint (counting every sender's live leases), so one slow
    /// endpoint holds at most that many of the senders.
    public func claim(owner: String, limit: Int, perEndpoint: Int, lease: Duration) async throws -> [Claim] {
        guard limit > 0 else { return [] }
        return try await pool.query(
            """
            WITH picked AS (
                SELECT c.seq
                  FROM webhook_endpoint e
                 CROSS JOIN LATERAL (
                       SELECT count(*) AS busy FROM webhook_delivery b
                        WHERE b.endpoint_id = e.id AND b.status IN ('PENDING', 'RETRYING') AND b.lease_expires_at > now()
                       ) b
                 CROSS JOIN LATERAL (
                       SELECT w.seq FROM webhook_delivery w
                        WHERE w.endpoint_id = e.id AND w.status IN ('PENDING', 'RETRYING') AND w.next_attempt_at <= now()
                          AND (w.lease_expires_at IS NULL OR w.lease_expires_at <= now())
                        ORDER BY w.next_attempt_at
                        LIMIT greatest(\(perEndpoint) - b.busy, 0)
                        FOR UPDATE SKIP LOCKED
                       ) c
                 WHERE e.deleted_at IS NULL
                 LIMIT \(limit)
            )
            UPDATE webhook_delivery d
               SET lease_owner = \(owner), lease_expires_at = now() + make_interval(secs => \(lease.inSeconds))
              FROM picked p, webhook_endpoint e
             WHERE d.seq = p.seq AND e.id = d.endpoint_id
            RETURNING d.seq, d.endpoint_id, e.url, d.event_id, d.payload, d.attempts, d.created_at, e.secret_key_id,
                      e.secret_sealed,
                      CASE WHEN e.previous_secret_expires_at > now() THEN e.previous_secret_key_id END AS previous_key_id,
                      CASE WHEN e.previous_secret_expires_at > now() THEN e.previous_secret_sealed END AS previous_sealed
            """
        ).map { row in
            let previousKey = try row.decode("previous_key_id", as: String?.self)
            let previousSealed = try row.decode("previous_sealed", as: [UInt8]?.self)
            return Claim(
                seq: try row.decode("seq"), endpointID: try row.decode("endpoint_id"), url: try row.decode("url"),
                eventID: try row.decode("event_id"), payload: try row.decode("payload"), attempts: try row.decode("attempts"),
                createdAt: try row.decode("created_at"),
                secret: SealedSecret(keyID: try row.decode("secret_key_id"), sealed: try row.decode("secret_sealed")),
                previousSecret: previousKey.flatMap { key in previousSealed.map { SealedSecret(keyID: key, sealed: $0) } })
        }
    }

    /// Records the attempts `owner` made, in one statement; a row whose lease another sender has
    /// taken since is left to that sender.
    public func record(_ outcomes: [Outcome], owner: String) async throws -> Recorded {
        guard !outcomes.isEmpty else { return Recorded() }
        let rows = try await pool.query(
            """
            UPDATE webhook_delivery d
               SET attempts = d.attempts + 1, last_status_code = NULLIF(o.code, 0), last_error = NULLIF(o.error, ''),
                   status = CASE WHEN o.delivered THEN 'DELIVERED' WHEN o.final THEN 'DEAD' ELSE 'RETRYING' END,
                   next_attempt_at = CASE WHEN o.delivered OR o.final THEN d.next_attempt_at
                                          ELSE now() + make_interval(secs => o.delay) END,
                   delivered_at = CASE WHEN o.delivered THEN now() END,
                   lease_owner = NULL, lease_expires_at = NULL
              FROM unnest(\(PostgresArray(outcomes.map(\.seq)))::bigint[], \(PostgresArray(outcomes.map(\.delivered)))::bool[],
                          \(PostgresArray(outcomes.map { $0.statusCode ?? 0 }))::int[],
                          \(PostgresArray(outcomes.map { $0.error ?? "" }))::text[],
                          \(PostgresArray(outcomes.map(\.retryAfter.inSeconds)))::float8[],
                          \(PostgresArray(outcomes.map(\.final)))::bool[]) AS o(seq, delivered, code, error, delay, final)
             WHERE d.seq = o.seq AND d.lease_owner = \(owner) AND d.status IN ('PENDING', 'RETRYING')
            RETURNING d.status, extract(epoch FROM now() - d.created_at)::float8 AS latency,
                      (SELECT e.kind FROM webhook_endpoint e WHERE e.id = d.endpoint_id) AS kind
            """)
        var recorded = Recorded()
        for row in rows {
            if try row.decode("kind", as: String.self) == EndpointKind.appleForward.rawValue {
                switch Status(rawValue: try row.decode("status")) {
                case .delivered: recorded.forwards.delivered += 1
                case .dead: recorded.forwards.dead += 1
                default: recorded.forwards.retrying += 1
                }
                continue
            }
            switch Status(rawValue: try row.decode("status")) {
            case .delivered:
                recorded.delivered += 1
                recorded.deliveredLatencies.append(try row.decode("latency"))
            case .dead: recorded.dead += 1
            default: recorded.retrying += 1
            }
        }
        return recorded
    }

    /// An endpoint's deliveries, newest first, optionally of one status, before `beforeSeq`.
    public func deliveries(endpointID: String, status: Status?, beforeSeq: Int64?, limit: Int) async throws -> [Delivery] {
        try await pool.query(
            """
            SELECT seq, event_id, type, status, attempts, last_status_code, last_error,
                   CASE WHEN status IN ('PENDING', 'RETRYING') THEN next_attempt_at END AS next_attempt_at
              FROM webhook_delivery
             WHERE endpoint_id = \(endpointID) AND (\(status?.rawValue)::text IS NULL OR status = \(status?.rawValue))
               AND seq < \(beforeSeq ?? Int64.max)
             ORDER BY seq DESC
             LIMIT \(limit)
            """
        ).map(Self.delivery)
    }

    /// Queues a delivery again at once (same event, same webhook-id), whatever its state: one more
    /// attempt after a DEAD, or now rather than at its backoff. Nil when there is no such delivery.
    public func retry(endpointID: String, eventID: String, operator operatorName: String, reason: String) async throws
        -> Delivery?
    {
        try await pool.transaction { db in
            let before = try await db.query(
                """
                SELECT seq, event_id, type, status, attempts, last_status_code, last_error, next_attempt_at
                  FROM webhook_delivery WHERE endpoint_id = \(endpointID) AND event_id = \(eventID) FOR UPDATE
                """
            ).first.map(Self.delivery)
            guard let before else { return nil }
            let after = try await db.query(
                """
                UPDATE webhook_delivery
                   SET status = CASE WHEN status = 'RETRYING' THEN 'RETRYING' ELSE 'PENDING' END, next_attempt_at = now(),
                       delivered_at = NULL
                 WHERE seq = \(before.seq)
                RETURNING seq, event_id, type, status, attempts, last_status_code, last_error, next_attempt_at
                """
            ).single()
            let delivery = try Self.delivery(after)
            try await audit.record(
                on: db, operator: operatorName, action: "webhook.retry", reason: reason, before: before, after: delivery)
            return delivery
        }
    }

    /// The deliveries to live endpoints of `kind` waiting (due or backing off), and how long the
    /// oldest due one has waited since it became due (0 when none is): the alerts' backlog and lag.
    public func backlog(kind: EndpointKind = .webhook) async throws -> (waiting: Int, dueLagSeconds: Double) {
        let row = try await pool.query(
            """
            SELECT count(*)::bigint AS waiting,
                   coalesce(extract(epoch FROM now() - min(next_attempt_at) FILTER (WHERE next_attempt_at <= now())), 0)::float8 AS lag
              FROM webhook_delivery d JOIN webhook_endpoint e ON e.id = d.endpoint_id
             WHERE d.status IN ('PENDING', 'RETRYING') AND e.deleted_at IS NULL AND e.kind = \(kind.rawValue)
            """
        ).single()
        return (try row.decode("waiting", as: Int.self), try row.decode("lag"))
    }

    static func delivery(_ row: PostgresRow) throws -> Delivery {
        Delivery(
            seq: try row.decode("seq"), eventId: try row.decode("event_id"), type: try row.decode("type"),
            status: Status(rawValue: try row.decode("status")) ?? .pending, attempts: try row.decode("attempts"),
            lastStatusCode: try row.decode("last_status_code"), lastError: try row.decode("last_error"),
            nextAttemptAt: try row.decode("next_attempt_at"))
    }
}
