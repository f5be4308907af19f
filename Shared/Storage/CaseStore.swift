import Domain
import Foundation
import Postgres

/// What an id given to the support lookup turned out to be.
public struct CaseMatch: Sendable, Codable, Equatable {
    /// `userId`, `orderNo`, `transactionId`, `originalTransactionId`, `notificationUUID` or `appAccountToken`.
    public var kind: String
    public var id: String
}

/// A JSON document as stored (audit states), carried through to the caller's JSON unchanged.
public indirect enum JSONValue: Sendable, Codable, Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .number(let value):
            // Whole numbers (ids, credit amounts) print without a fraction.
            if value.rounded() == value, abs(value) < 1e15 { try container.encode(Int64(value)) } else { try container.encode(value) }
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }
}

/// Everything known about one user or one chain, for support: who, what they bought, what Apple
/// and the app said, what the workers did with it, what credits it gave, what operators did, and
/// all of it as one timeline.
public struct SupportCase: Sendable, Codable {
    public struct User: Sendable, Codable {
        public var userId: String
        public var isTestUser: Bool
        public var createdAt: Date
        public var appAccountTokens: [String]
        /// When a parent's withdrawn consent (RESCIND_CONSENT) turned the user's entitlements off; nil when in force.
        public var consentRescindedAt: Date?
    }
    public struct Binding: Sendable, Codable {
        public var userId: String
        public var source: String
        public var appleTokenStatus: String?
    }
    public struct Chain: Sendable, Codable {
        public var environment: String
        public var originalTransactionId: String
        /// Nil for a chain no subscription row exists for yet (its facts wait unattributed).
        public var userId: String?
        public var status: String?
        public var activeProductId: String?
        public var pendingProductId: String?
        public var autoRenewEnabled: Bool?
        public var expiresAt: Date?
        public var graceExpiresAt: Date?
        public var isFamilyShared: Bool?
        public var frozenReason: String?
        public var updatedAt: Date?
        public var binding: Binding?
        public var history: [StatusChange]
    }
    public struct StatusChange: Sendable, Codable {
        public var previousStatus: String?
        public var currentStatus: String
        public var cause: String
        public var eventId: Int64?
        public var at: Date
    }
    public struct Order: Sendable, Codable {
        public var orderNo: String
        public var userId: String
        public var productId: String
        public var orderType: String
        public var status: String
        public var environment: String?
        public var transactionId: String?
        public var originalTransactionId: String?
        public var failureCode: String?
        public var createdAt: Date
        public var updatedAt: Date
        public var history: [StatusChange]
    }
    /// A verified transaction as decoded from Apple's signed payload.
    public struct Transaction: Sendable, Codable {
        public var environment: String
        public var transactionId: String
        public var originalTransactionId: String
        public var webOrderLineItemId: String?
        public var productId: String
        public var userId: String?
        public var appAccountToken: String?
        public var transactionReason: String?
        public var purchaseDate: Date
        public var originalPurchaseDate: Date?
        public var expiresDate: Date?
        public var ownershipType: String
        public var revocationDate: Date?
        public var revocationReason: Int?
        public var revocationType: String?
        public var offerType: Int?
        public var offerIdentifier: String?
        public var offerDiscountType: String?
        public var isUpgraded: Bool
        public var priceMilliunits: Int64?
        public var currency: String?
        public var signedDate: Date
    }
    public struct Grant: Sendable, Codable {
        public var grantKey: String
        public var pool: String
        /// Micro-credits, as every amount here.
        public var amount: Int64
        public var revokedAmount: Int64
        public var unrecoverableAmount: Int64
        public var reason: String
        public var transactionId: String?
        public var createdAt: Date
    }
    public struct Balance: Sendable, Codable {
        public var pool: String
        public var balance: Int64
    }
    public struct LedgerEntry: Sendable, Codable {
        public var id: Int64
        public var pool: String
        public var delta: Int64
        public var balanceAfter: Int64
        public var entryType: String
        public var reference: String
        public var at: Date
    }
    public struct ConsumptionAnswer: Sendable, Codable {
        public var notificationUUID: String
        public var transactionId: String?
        public var outcome: String
        public var errorMessage: String?
        public var createdAt: Date
    }
    public struct Audit: Sendable, Codable {
        public var id: Int64
        public var `operator`: String
        public var action: String
        public var reason: String
        public var before: JSONValue?
        public var after: JSONValue?
        public var at: Date
    }
    /// An event the app's other services were sent about the user, and its webhook deliveries.
    public struct OutboundEvent: Sendable, Codable {
        public var id: String
        public var type: String
        public var environment: String
        public var occurredAt: Date
        /// Per user, strictly increasing.
        public var sequence: Int64
        public var data: JSONValue
        /// When the broker took it; nil while it waits in the outbox.
        public var publishedAt: Date?
        /// One per endpoint the event was queued for, deleted endpoints included.
        public var deliveries: [OutboundDelivery]
    }
    /// One webhook delivery of an outbound event.
    public struct OutboundDelivery: Sendable, Codable {
        public var endpointId: String
        public var url: String
        /// `PENDING`, `RETRYING`, `DELIVERED` or `DEAD`.
        public var status: String
        public var attempts: Int
        public var lastStatusCode: Int?
        public var lastError: String?
        /// Only while it waits for an attempt (`PENDING`, `RETRYING`).
        public var nextAttemptAt: Date?
        /// When its endpoint was deleted: nothing is sent to it any more.
        public var endpointDeletedAt: Date?
    }
    /// One line of the timeline, oldest first.
    public struct TimelineItem: Sendable, Codable {
        public var at: Date
        public var kind: String
        public var id: String
        public var summary: String
    }

    public var user: User?
    /// What the user may use now and their promotional grants (nil without a user).
    public var entitlements: EntitlementOverview?
    public var chains: [Chain]
    public var orders: [Order]
    public var transactions: [Transaction]
    public var events: [EventSummary]
    public var grants: [Grant]
    public var balances: [Balance]
    public var ledger: [LedgerEntry]
    public var consumptionAnswers: [ConsumptionAnswer]
    public var audit: [Audit]
    /// The user's newest outbound events, oldest first, each with its deliveries.
    public var outboundEvents: [OutboundEvent]
    public var timeline: [TimelineItem]
}

/// What the support lookup answers (admin API and `subsctl lookup --json` alike).
public struct CaseLookup: Sendable, Encodable {
    public var matches: [CaseMatch]
    public var supportCase: SupportCase

    enum CodingKeys: String, CodingKey {
        case matches
        case supportCase = "case"
    }
}

/// One inbound event (notification or client submission) as operators list it; events of both
/// kinds share one id space.
public struct EventSummary: Sendable, Codable {
    public var eventId: Int64
    /// `notification` or `submission`.
    public var kind: String
    public var status: String
    public var environment: String
    public var notificationUUID: String?
    public var notificationType: String?
    public var subtype: String?
    public var submissionKind: String?
    public var userId: String?
    public var orderNo: String?
    public var transactionId: String?
    public var originalTransactionId: String?
    public var signedDate: Date?
    public var receivedAt: Date
    public var updatedAt: Date
    /// Attempts that failed so far.
    public var attempts: Int
    public var nextRetryAt: Date?
    public var errorCode: String?
    public var errorMessage: String?
    /// When the retention job redacted its signed payload (`PAYLOAD_RETENTION_DAYS`).
    public var payloadRedactedAt: Date?
    /// The worker holding its lease, while one does.
    public var worker: String?
}

/// How many events stand in one status with one error code, and since when.
public struct EventCount: Sendable, Codable, Equatable {
    public var status: String
    public var errorCode: String?
    public var count: Int
    /// Seconds since the oldest of them last changed.
    public var oldestAgeSeconds: Int
}

/// The reads of the support lookup and the event queue (admin API and `subsctl lookup|events`):
/// read-only, over every table a case touches.
public struct CaseStore: Sendable {
    public let pool: PostgresPool
    /// Rows per section of a case; the timeline holds what the sections hold.
    public static let sectionLimit = 200

    public init(pool: PostgresPool) { self.pool = pool }

    /// What `q` is (it may be several things at once), and the case it leads to; nil when nothing has this id.
    ///
    /// One read-only snapshot, so the sections agree with each other. Its statements use generic
    /// plans: the events section joins the partitioned table (each row read in its own month), and
    /// re-planning such statements over every month for each id was half of PostgreSQL's time per
    /// lookup.
    public func lookup(_ q: String, now: Date) async throws -> CaseLookup? {
        try await pool.transaction(isolation: .repeatableRead, readOnly: true, genericPlans: true) { db in
            let token = UUID(uuidString: q)?.uuidString.lowercased()
            let matches = try await db.query(
                """
                SELECT kind FROM (VALUES
                    (1, 'userId', EXISTS (SELECT 1 FROM app_user WHERE user_id = \(q))),
                    (2, 'orderNo', EXISTS (SELECT 1 FROM payment_order WHERE order_no = \(q))),
                    (3, 'transactionId', EXISTS (SELECT 1 FROM apple_transaction WHERE transaction_id = \(q))
                        OR EXISTS (SELECT 1 FROM inbound_event_key WHERE transaction_id = \(q))),
                    (4, 'originalTransactionId', EXISTS (SELECT 1 FROM apple_transaction WHERE original_transaction_id = \(q))
                        OR EXISTS (SELECT 1 FROM inbound_event_key WHERE original_transaction_id = \(q))
                        OR EXISTS (SELECT 1 FROM user_subscription WHERE original_transaction_id = \(q))),
                    (5, 'notificationUUID', EXISTS (SELECT 1 FROM inbound_event_key WHERE notification_uuid = \(q))),
                    (6, 'appAccountToken', EXISTS (SELECT 1 FROM user_account_token WHERE app_account_token = \(token)::uuid))
                ) AS m(rank, kind, found) WHERE found ORDER BY rank
                """
            ).map { CaseMatch(kind: try $0.decode("kind"), id: q) }
            guard !matches.isEmpty else { return nil }
            // The user first: the one named, else who the order, token, transaction or chain belongs to.
            let userID: String? = try await db.query(
                """
                SELECT user_id FROM (
                    SELECT 1 AS rank, user_id FROM app_user WHERE user_id = \(q)
                    UNION ALL SELECT 2, user_id FROM payment_order WHERE order_no = \(q)
                    UNION ALL SELECT 3, user_id FROM user_account_token WHERE app_account_token = \(token)::uuid
                    UNION ALL SELECT 4, user_id FROM apple_transaction WHERE transaction_id = \(q) AND user_id IS NOT NULL
                    UNION ALL SELECT 5, s.user_id FROM user_subscription s
                     WHERE s.original_transaction_id IN (
                        SELECT original_transaction_id FROM inbound_event_key
                         WHERE (transaction_id = \(q) OR notification_uuid = \(q)) AND original_transaction_id IS NOT NULL
                        UNION SELECT \(q))
                    UNION ALL SELECT 6, user_id FROM chain_binding WHERE original_transaction_id = \(q)
                    UNION ALL SELECT 7, user_id FROM inbound_event_key WHERE transaction_id = \(q) AND user_id IS NOT NULL
                ) AS u ORDER BY rank LIMIT 1
                """
            ).first?.decode("user_id")
            let chains = try await Self.chainKeys(q, userID: userID, on: db)
            let supportCase = try await Self.supportCase(userID: userID, chains: chains, q: q, now: now, on: db)
            return CaseLookup(matches: matches, supportCase: supportCase)
        }
    }

    /// The chains of the case: those `q` names, and the user's.
    static func chainKeys(_ q: String, userID: String?, on db: PostgresConnection) async throws
        -> [(environment: String, originalTransactionID: String)]
    {
        try await db.query(
            """
            SELECT environment, original_transaction_id FROM apple_transaction
             WHERE transaction_id = \(q) OR original_transaction_id = \(q)
            UNION SELECT environment, original_transaction_id FROM inbound_event_key
             WHERE (transaction_id = \(q) OR original_transaction_id = \(q) OR notification_uuid = \(q))
               AND original_transaction_id IS NOT NULL
            UNION SELECT environment, original_transaction_id FROM payment_order
             WHERE order_no = \(q) AND original_transaction_id IS NOT NULL AND environment IS NOT NULL
            UNION SELECT environment, original_transaction_id FROM user_subscription
             WHERE original_transaction_id = \(q) OR user_id = \(userID)
            UNION SELECT environment, original_transaction_id FROM chain_binding WHERE user_id = \(userID)
            UNION SELECT environment, original_transaction_id FROM apple_transaction WHERE user_id = \(userID)
            ORDER BY 1, 2 LIMIT \(sectionLimit)
            """
        ).map { (try $0.decode("environment"), try $0.decode("original_transaction_id")) }
    }

    /// The case of `userID` and `chains`, one section at a time, all on `db`'s snapshot.
    static func supportCase(
        userID: String?, chains: [(environment: String, originalTransactionID: String)], q: String, now: Date,
        on db: PostgresConnection
    ) async throws -> SupportCase {
        let scope = Section.Scope(userID: userID, q: q, chains: chains)
        let user = try await Section.user(userID, on: db)
        var chainList = try await Section.chains(scope, on: db)
        var orders = try await Section.orders(scope, on: db)
        try await Section.attachHistory(scope, to: &chainList, and: &orders, on: db)
        let transactions = try await Section.transactions(scope, on: db)
        let events = try await Section.events(scope, on: db)
        let grants = try await Section.grants(userID, on: db)
        let balances = try await Section.balances(userID, on: db)
        let ledger = try await Section.ledger(userID, on: db)
        let consumption = try await Section.consumptionAnswers(userID, events: events, on: db)
        let audit = try await Section.audit(scope, events: events, on: db)
        let outbound = try await Section.outboundEvents(userID, on: db)
        var entitlements: EntitlementOverview?
        if let userID { entitlements = try await EntitlementStore.overview(userID: userID, now: now, on: db) }
        var supportCase = SupportCase(
            user: user, entitlements: entitlements, chains: chainList, orders: orders, transactions: transactions, events: events, grants: grants,
            balances: balances, ledger: ledger, consumptionAnswers: consumption, audit: audit, outboundEvents: outbound, timeline: [])
        supportCase.timeline = Self.timeline(of: supportCase)
        return supportCase
    }

    /// One statement per section of a case, each on the caller's connection so that the case
    /// reads one snapshot.
    enum Section {
        /// What the sections select by.
        struct Scope {
            var userID: String?
            var q: String
            var chains: [(environment: String, originalTransactionID: String)]

            var environments: PostgresArray<String> { PostgresArray(chains.map(\.environment)) }
            var originals: PostgresArray<String> { PostgresArray(chains.map(\.originalTransactionID)) }
            /// The chains' keys as `environment:originalTransactionId`; each statement also names
            /// the original ids alone, so an index on them serves it.
            var chainKeys: [String] { chains.map { "\($0.environment):\($0.originalTransactionID)" } }
        }

        static func user(_ userID: String?, on db: PostgresConnection) async throws -> SupportCase.User? {
            guard let userID,
                let row = try await db.query(
                    """
                    SELECT u.user_id, u.is_test_user, u.created_at, u.consent_rescinded_at,
                           coalesce(array_to_string(array_agg(t.app_account_token::text) FILTER (WHERE t.user_id IS NOT NULL), ','), '') AS tokens
                      FROM app_user u LEFT JOIN user_account_token t ON t.user_id = u.user_id
                     WHERE u.user_id = \(userID) GROUP BY u.user_id
                    """
                ).first
            else { return nil }
            let tokens: String = try row.decode("tokens")
            return SupportCase.User(
                userId: try row.decode("user_id"), isTestUser: try row.decode("is_test_user"),
                createdAt: try row.decode("created_at"), appAccountTokens: tokens.split(separator: ",").map(String.init),
                consentRescindedAt: try row.decode("consent_rescinded_at"))
        }

        /// Every chain of the scope, with its subscription row and binding when it has them.
        static func chains(_ scope: Scope, on db: PostgresConnection) async throws -> [SupportCase.Chain] {
            try await db.query(
                """
                SELECT c.e AS environment, c.o AS original_transaction_id, s.user_id,
                       \(fragment: SubscriptionStore.statusNow) AS status, s.active_product_id,
                       s.pending_product_id, s.auto_renew_enabled, s.expires_at, s.grace_expires_at, s.is_family_shared,
                       s.frozen_reason, s.updated_at, b.user_id AS bound_user_id, b.source, b.apple_token_status
                  FROM unnest(\(scope.environments)::text[], \(scope.originals)::text[]) AS c(e, o)
                  LEFT JOIN user_subscription s ON s.environment = c.e AND s.original_transaction_id = c.o
                  LEFT JOIN chain_binding b ON b.environment = c.e AND b.original_transaction_id = c.o
                 ORDER BY c.e, c.o
                """
            ).map { row in
                let environment: String = try row.decode("environment")
                let original: String = try row.decode("original_transaction_id")
                let boundUser: String? = try row.decode("bound_user_id")
                return SupportCase.Chain(
                    environment: environment, originalTransactionId: original, userId: try row.decode("user_id"),
                    status: try row.decode("status"), activeProductId: try row.decode("active_product_id"),
                    pendingProductId: try row.decode("pending_product_id"), autoRenewEnabled: try row.decode("auto_renew_enabled"),
                    expiresAt: try row.decode("expires_at"), graceExpiresAt: try row.decode("grace_expires_at"),
                    isFamilyShared: try row.decode("is_family_shared"), frozenReason: try row.decode("frozen_reason"),
                    updatedAt: try row.decode("updated_at"),
                    binding: try boundUser.map {
                        SupportCase.Binding(
                            userId: $0, source: try row.decode("source"), appleTokenStatus: try row.decode("apple_token_status"))
                    },
                    history: [])
            }
        }

        static func orders(_ scope: Scope, on db: PostgresConnection) async throws -> [SupportCase.Order] {
            try await db.query(
                """
                SELECT order_no, user_id, product_id, order_type, status, environment, transaction_id, original_transaction_id,
                       failure_code, created_at, updated_at FROM payment_order
                 WHERE user_id = \(scope.userID) OR order_no = \(scope.q)
                    OR (environment = ANY(\(scope.environments)::text[]) AND original_transaction_id = ANY(\(scope.originals)::text[])
                        AND environment || ':' || original_transaction_id = ANY(\(PostgresArray(scope.chainKeys))::text[]))
                 ORDER BY created_at, id LIMIT \(sectionLimit)
                """
            ).map { row in
                let orderNo: String = try row.decode("order_no")
                return SupportCase.Order(
                    orderNo: orderNo, userId: try row.decode("user_id"), productId: try row.decode("product_id"),
                    orderType: try row.decode("order_type"), status: try row.decode("status"),
                    environment: try row.decode("environment"), transactionId: try row.decode("transaction_id"),
                    originalTransactionId: try row.decode("original_transaction_id"), failureCode: try row.decode("failure_code"),
                    createdAt: try row.decode("created_at"), updatedAt: try row.decode("updated_at"),
                    history: [])
            }
        }

        /// Status history of the chains and orders, in one indexed statement.
        static func attachHistory(
            _ scope: Scope, to chains: inout [SupportCase.Chain], and orders: inout [SupportCase.Order], on db: PostgresConnection
        ) async throws {
            let keys = PostgresArray(scope.chainKeys + orders.map(\.orderNo))
            let historyRows = try await db.query(
                """
                SELECT entity_type, entity_key, previous_status, current_status, cause, event_id, created_at FROM status_history
                 WHERE entity_type IN ('SUBSCRIPTION', 'ORDER')
                   AND entity_key = ANY(\(keys)::text[])
                 ORDER BY id LIMIT \(sectionLimit * 4)
                """)
            var history: [String: [SupportCase.StatusChange]] = [:]
            for row in historyRows {
                let key = "\(try row.decode("entity_type", as: String.self))/\(try row.decode("entity_key", as: String.self))"
                history[key, default: []].append(
                    SupportCase.StatusChange(
                        previousStatus: try row.decode("previous_status"), currentStatus: try row.decode("current_status"),
                        cause: try row.decode("cause"), eventId: try row.decode("event_id"), at: try row.decode("created_at")))
            }
            for index in chains.indices {
                chains[index].history = history["SUBSCRIPTION/\(chains[index].environment):\(chains[index].originalTransactionId)"] ?? []
            }
            for index in orders.indices { orders[index].history = history["ORDER/\(orders[index].orderNo)"] ?? [] }
        }

        static func transactions(_ scope: Scope, on db: PostgresConnection) async throws -> [SupportCase.Transaction] {
            try await db.query(
                """
                SELECT environment, transaction_id, original_transaction_id, web_order_line_item_id, product_id, user_id,
                       app_account_token, transaction_reason, purchase_date, original_purchase_date, expires_date, ownership_type,
                       revocation_date, revocation_reason, revocation_type, offer_type, offer_identifier, offer_discount_type,
                       is_upgraded, price_milliunits, currency, signed_date
                  FROM apple_transaction
                 WHERE original_transaction_id = ANY(\(scope.originals)::text[])
                   AND environment || ':' || original_transaction_id = ANY(\(PostgresArray(scope.chainKeys))::text[])
                 ORDER BY purchase_date, id LIMIT \(sectionLimit)
                """
            ).map { row in
                SupportCase.Transaction(
                    environment: try row.decode("environment"), transactionId: try row.decode("transaction_id"),
                    originalTransactionId: try row.decode("original_transaction_id"),
                    webOrderLineItemId: try row.decode("web_order_line_item_id"), productId: try row.decode("product_id"),
                    userId: try row.decode("user_id"), appAccountToken: try row.decode("app_account_token"),
                    transactionReason: try row.decode("transaction_reason"), purchaseDate: try row.decode("purchase_date"),
                    originalPurchaseDate: try row.decode("original_purchase_date"), expiresDate: try row.decode("expires_date"),
                    ownershipType: try row.decode("ownership_type"), revocationDate: try row.decode("revocation_date"),
                    revocationReason: try row.decode("revocation_reason", as: Int32?.self).map(Int.init),
                    revocationType: try row.decode("revocation_type"),
                    offerType: try row.decode("offer_type", as: Int32?.self).map(Int.init),
                    offerIdentifier: try row.decode("offer_identifier"), offerDiscountType: try row.decode("offer_discount_type"),
                    isUpgraded: try row.decode("is_upgraded"), priceMilliunits: try row.decode("price_milliunits"),
                    currency: try row.decode("currency"), signedDate: try row.decode("signed_date"))
            }
        }

        static func events(_ scope: Scope, on db: PostgresConnection) async throws -> [EventSummary] {
            try await db.query(
                """
                SELECT \(sql: CaseStore.eventColumns) FROM inbound_event
                 WHERE (id, received_at) IN (
                    SELECT id, received_at FROM inbound_event_key
                     WHERE (original_transaction_id = ANY(\(scope.originals)::text[])
                            AND environment || ':' || original_transaction_id = ANY(\(PostgresArray(scope.chainKeys))::text[]))
                        OR (submission_kind IN ('CLIENT', 'OBSERVED') AND user_id = \(scope.userID))
                        OR notification_uuid = \(scope.q)
                     ORDER BY id LIMIT \(sectionLimit))
                 ORDER BY id
                """
            ).map(CaseStore.eventSummary)
        }

        static func grants(_ userID: String?, on db: PostgresConnection) async throws -> [SupportCase.Grant] {
            try await db.query(
                """
                SELECT grant_key, pool, amount, revoked_amount, unrecoverable_amount, reason, transaction_id, created_at
                  FROM credit_grant WHERE user_id = \(userID) ORDER BY created_at, id LIMIT \(sectionLimit)
                """
            ).map { row in
                SupportCase.Grant(
                    grantKey: try row.decode("grant_key"), pool: try row.decode("pool"), amount: try row.decode("amount"),
                    revokedAmount: try row.decode("revoked_amount"), unrecoverableAmount: try row.decode("unrecoverable_amount"),
                    reason: try row.decode("reason"), transactionId: try row.decode("transaction_id"),
                    createdAt: try row.decode("created_at"))
            }
        }

        static func balances(_ userID: String?, on db: PostgresConnection) async throws -> [SupportCase.Balance] {
            try await db.query(
                "SELECT pool, balance FROM credit_account WHERE user_id = \(userID) ORDER BY pool"
            ).map { SupportCase.Balance(pool: try $0.decode("pool"), balance: try $0.decode("balance")) }
        }

        /// The newest entries, shown oldest first.
        static func ledger(_ userID: String?, on db: PostgresConnection) async throws -> [SupportCase.LedgerEntry] {
            try await db.query(
                """
                SELECT * FROM (
                    SELECT id, pool, delta, balance_after, entry_type, reference, created_at FROM credit_ledger
                     WHERE user_id = \(userID) ORDER BY id DESC LIMIT \(sectionLimit)
                ) AS newest ORDER BY id
                """
            ).map { row in
                SupportCase.LedgerEntry(
                    id: try row.decode("id"), pool: try row.decode("pool"), delta: try row.decode("delta"),
                    balanceAfter: try row.decode("balance_after"), entryType: try row.decode("entry_type"),
                    reference: try row.decode("reference"), at: try row.decode("created_at"))
            }
        }

        static func consumptionAnswers(
            _ userID: String?, events: [EventSummary], on db: PostgresConnection
        ) async throws -> [SupportCase.ConsumptionAnswer] {
            try await db.query(
                """
                SELECT notification_uuid, transaction_id, outcome, error_message, created_at FROM consumption_answer
                 WHERE user_id = \(userID) OR notification_uuid = ANY(\(PostgresArray(events.compactMap(\.notificationUUID)))::text[])
                 ORDER BY created_at LIMIT \(sectionLimit)
                """
            ).map { row in
                SupportCase.ConsumptionAnswer(
                    notificationUUID: try row.decode("notification_uuid"), transactionId: try row.decode("transaction_id"),
                    outcome: try row.decode("outcome"), errorMessage: try row.decode("error_message"),
                    createdAt: try row.decode("created_at"))
            }
        }

        /// The user's newest outbound events, oldest first, then their deliveries.
        static func outboundEvents(_ userID: String?, on db: PostgresConnection) async throws -> [SupportCase.OutboundEvent] {
            guard let userID else { return [] }
            var events = try await db.query(
                """
                SELECT * FROM (
                    SELECT id, type, environment, occurred_at, sequence, data::text AS data, published_at FROM outbound_event
                     WHERE user_id = \(userID) ORDER BY sequence DESC LIMIT \(sectionLimit)
                ) AS newest ORDER BY sequence
                """
            ).map { row in
                SupportCase.OutboundEvent(
                    id: try row.decode("id"), type: try row.decode("type"), environment: try row.decode("environment"),
                    occurredAt: try row.decode("occurred_at"), sequence: try row.decode("sequence"),
                    data: try JSONDecoder().decode(JSONValue.self, from: Data(try row.decode("data", as: String.self).utf8)),
                    publishedAt: try row.decode("published_at"), deliveries: [])
            }
            guard !events.isEmpty else { return [] }
            // Joined from the endpoints so that each (endpoint, event) pair is one probe of the
            // deliveries' unique key: the deliveries have no index by event alone.
            let deliveries = try await db.query(
                """
                SELECT d.event_id, d.endpoint_id, e.url, e.deleted_at, d.status, d.attempts, d.last_status_code, d.last_error,
                       CASE WHEN d.status IN ('PENDING', 'RETRYING') THEN d.next_attempt_at END AS next_attempt_at
                  FROM webhook_endpoint e
                  JOIN webhook_delivery d ON d.endpoint_id = e.id AND d.event_id = ANY(\(PostgresArray(events.map(\.id)))::text[])
                 ORDER BY e.created_at, e.id
                """
            ).map { row in
                (
                    try row.decode("event_id", as: String.self),
                    SupportCase.OutboundDelivery(
                        endpointId: try row.decode("endpoint_id"), url: try row.decode("url"), status: try row.decode("status"),
                        attempts: try row.decode("attempts"), lastStatusCode: try row.decode("last_status_code"),
                        lastError: try row.decode("last_error"), nextAttemptAt: try row.decode("next_attempt_at"),
                        endpointDeletedAt: try row.decode("deleted_at"))
                )
            }
            let byEvent = Dictionary(grouping: deliveries, by: \.0)
            for index in events.indices { events[index].deliveries = byEvent[events[index].id]?.map(\.1) ?? [] }
            return events
        }

        /// The newest entries of the case's audit trail, shown oldest first.
        static func audit(_ scope: Scope, events: [EventSummary], on db: PostgresConnection) async throws -> [SupportCase.Audit] {
            // Audit states name users and chains as JSON strings: a row is the case's when one of its
            // ids appears quoted in it, or when it names one of its events. The trail is small (manual
            // actions), so a scan is fine.
            let needles = ([scope.userID].compactMap { $0 } + scope.chains.map(\.originalTransactionID)).map { "\"\($0)\"" }
            let audit = try await db.query(
                """
                SELECT id, operator, action, reason, before::text AS before, after::text AS after, created_at FROM audit_log
                 WHERE EXISTS (SELECT 1 FROM unnest(\(PostgresArray(needles))::text[]) AS n(needle)
                                WHERE strpos(coalesce(before::text, '') || coalesce(after::text, ''), needle) > 0)
                    OR coalesce(before->>'eventId', after->>'eventId') = ANY(\(PostgresArray(events.map { String($0.eventId) }))::text[])
                 ORDER BY id DESC LIMIT \(sectionLimit)
                """
            ).map { row in
                let decode = { (text: String?) in
                    try text.map { try JSONDecoder().decode(JSONValue.self, from: Data($0.utf8)) }
                }
                return SupportCase.Audit(
                    id: try row.decode("id"), operator: try row.decode("operator"), action: try row.decode("action"),
                    reason: try row.decode("reason"), before: try decode(try row.decode("before")),
                    after: try decode(try row.decode("after")), at: try row.decode("created_at"))
            }
            return audit.reversed()
        }
    }

    /// Every dated item of the case, oldest first (ties in a stable order of kind and id).
    static func timeline(of c: SupportCase) -> [SupportCase.TimelineItem] {
        typealias Item = SupportCase.TimelineItem
        var items: [Item] = []
        if let user = c.user { items.append(Item(at: user.createdAt, kind: "user", id: user.userId, summary: "user created")) }
        for order in c.orders {
            items.append(
                Item(
                    at: order.createdAt, kind: "order", id: order.orderNo,
                    summary: "\(order.orderType) order for \(order.productId) created"))
            for change in order.history {
                items.append(
                    Item(
                        at: change.at, kind: "orderStatus", id: order.orderNo,
                        summary: "\(change.previousStatus ?? "–") → \(change.currentStatus) (\(change.cause))"))
            }
        }
        for chain in c.chains {
            for change in chain.history {
                items.append(
                    Item(
                        at: change.at, kind: "subscriptionStatus", id: "\(chain.environment):\(chain.originalTransactionId)",
                        summary: "\(change.previousStatus ?? "–") → \(change.currentStatus) (\(change.cause))"))
            }
        }
        for event in c.events {
            let what =
                event.kind == "notification"
                ? "\(event.notificationType ?? "?")" + (event.subtype.map { "/\($0)" } ?? "")
                : "\(event.submissionKind ?? "") submission of \(event.transactionId ?? "?")"
            items.append(
                Item(
                    at: event.receivedAt, kind: "event", id: String(event.eventId),
                    summary: "\(what): \(event.status)" + (event.errorCode.map { " \($0)" } ?? "")))
        }
        for transaction in c.transactions {
            items.append(
                Item(
                    at: transaction.purchaseDate, kind: "transaction", id: transaction.transactionId,
                    summary: "\(transaction.productId) purchased (\(transaction.ownershipType))"))
            if let revoked = transaction.revocationDate {
                items.append(Item(at: revoked, kind: "revocation", id: transaction.transactionId, summary: "transaction revoked"))
            }
        }
        for grant in c.grants {
            items.append(
                Item(at: grant.createdAt, kind: "grant", id: grant.grantKey, summary: "\(grant.amount) µcredits to \(grant.pool) (\(grant.reason))"))
        }
        for entry in c.ledger {
            items.append(
                Item(
                    at: entry.at, kind: "ledger", id: String(entry.id),
                    summary: "\(entry.entryType) \(entry.delta) on \(entry.pool), balance \(entry.balanceAfter)"))
        }
        for answer in c.consumptionAnswers {
            items.append(
                Item(at: answer.createdAt, kind: "consumption", id: answer.notificationUUID, summary: "consumption answer \(answer.outcome)"))
        }
        for row in c.audit {
            items.append(Item(at: row.at, kind: "audit", id: String(row.id), summary: "\(row.action) by \(row.operator): \(row.reason)"))
        }
        return items.sorted { ($0.at, $0.kind, $0.id) < ($1.at, $1.kind, $1.id) }
    }

    // MARK: The event queue

    static let eventColumns: StaticString = """
        id, kind, process_status, environment, notification_uuid, notification_type, subtype, submission_kind, user_id,
        order_no, transaction_id, original_transaction_id, signed_date, received_at, updated_at, retry_count, next_retry_at,
        error_code, error_message, redacted_at, CASE WHEN process_status = 'PROCESSING' THEN lease_owner END AS worker
        """

    static func eventSummary(_ row: PostgresRow) throws -> EventSummary {
        EventSummary(
            eventId: try row.decode("id"), kind: try row.decode("kind"), status: try row.decode("process_status"),
            environment: try row.decode("environment"), notificationUUID: try row.decode("notification_uuid"),
            notificationType: try row.decode("notification_type"), subtype: try row.decode("subtype"),
            submissionKind: try row.decode("submission_kind"), userId: try row.decode("user_id"),
            orderNo: try row.decode("order_no"), transactionId: try row.decode("transaction_id"),
            originalTransactionId: try row.decode("original_transaction_id"), signedDate: try row.decode("signed_date"),
            receivedAt: try row.decode("received_at"), updatedAt: try row.decode("updated_at"),
            attempts: Int(try row.decode("retry_count", as: Int32.self)), nextRetryAt: try row.decode("next_retry_at"),
            errorCode: try row.decode("error_code"), errorMessage: try row.decode("error_message"),
            payloadRedactedAt: try row.decode("redacted_at"), worker: try row.decode("worker"))
    }

    /// Events newest first, optionally of one status and error code, after the event `beforeID`
    /// (a page's last); up to `limit` rows.
    public func events(status: String?, errorCode: String?, beforeID: Int64?, limit: Int) async throws -> [EventSummary] {
        try await pool.query(
            """
            SELECT \(sql: Self.eventColumns) FROM inbound_event
             WHERE (\(status)::text IS NULL OR process_status = \(status))
               AND (\(errorCode)::text IS NULL OR error_code = \(errorCode))
               AND (\(beforeID)::bigint IS NULL OR id < \(beforeID))
             ORDER BY id DESC LIMIT \(limit)
            """
        ).map(Self.eventSummary)
    }

    /// One event, or nil.
    public func event(_ id: Int64) async throws -> EventSummary? {
        // Through its key, which names its month: one partition read instead of each month's.
        try await pool.query(
            """
            SELECT \(sql: Self.eventColumns) FROM inbound_event
             WHERE (id, received_at) IN (SELECT id, received_at FROM inbound_event_key WHERE id = \(id))
            """
        ).first.map(Self.eventSummary)
    }

    /// Counts by status and error code, with the age of the oldest of each (by its last change).
    public func eventSummary(now: Date) async throws -> [EventCount] {
        try await pool.query(
            """
            SELECT process_status, error_code, count(*) AS n,
                   greatest(0, floor(extract(epoch FROM \(now)::timestamptz - min(updated_at))))::bigint AS age
              FROM inbound_event GROUP BY process_status, error_code ORDER BY process_status, error_code NULLS FIRST
            """
        ).map { row in
            EventCount(
                status: try row.decode("process_status"), errorCode: try row.decode("error_code"),
                count: Int(try row.decode("n", as: Int64.self)), oldestAgeSeconds: Int(try row.decode("age", as: Int64.self)))
        }
    }
}
