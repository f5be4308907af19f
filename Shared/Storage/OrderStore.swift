import Domain
import Foundation
import Postgres
import ServiceRuntime

/// A purchase order as its owner sees it.
public struct StoredOrder: Sendable, Equatable {
    public var orderNo: String
    public var productID: String
    public var appAccountToken: String?
    public var status: OrderStatus
    public var type: OrderType
    public var transactionID: String?
    public var originalTransactionID: String?
    public var environment: String?
    public var failureCode: String?
    public var createdAt: Date
    public var updatedAt: Date
}

/// What a client asked for with `POST …/orders`, checked and with the values the store cannot
/// make itself (the new order number, the deployment's app and environment, the clock).
public struct OrderRequest: Sendable {
    public var userID: String
    public var productID: String
    public var requestID: String
    /// The app's bundle id: the catalogue's `app_key`.
    public var appKey: String
    /// The deployment's App Store environment, recorded as the order's requested one.
    public var environment: String
    /// Used only when an order is created.
    public var newOrderNo: String
    public var now: Date
    public var openOrderWindow: TimeInterval

    public init(
        userID: String, productID: String, requestID: String, appKey: String, environment: String, newOrderNo: String,
        now: Date, openOrderWindow: TimeInterval
    ) {
        self.userID = userID
        self.productID = productID
        self.requestID = requestID
        self.appKey = appKey
        self.environment = environment
        self.newOrderNo = newOrderNo
        self.now = now
        self.openOrderWindow = openOrderWindow
    }
}

/// How `OrderStore.create` ended.
public enum OrderCreationOutcome: Sendable, Equatable {
    case created(StoredOrder)
    /// The order made earlier for the same request.
    case replayed(StoredOrder)
    case refused(OrderCreation.Refusal)
}

/// How `OrderStore.reportByClient` ended.
public enum ClientReportOutcome: Sendable, Equatable {
    /// No such order of this user.
    case notFound
    /// The order after the report (unchanged when it already had the reported status).
    case answered(StoredOrder)
    /// The order's status cannot move to the reported one.
    case refused(StoredOrder)
}

/// The SQL of `payment_order` and its `status_history` rows: creation, the owner's reads and
/// reports, the links a transaction submission checks, and the expiry of stale intents.
public struct OrderStore: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    static let columns: StaticString = """
        o.order_no, o.product_id, o.app_account_token::text AS token, o.status, o.order_type, o.transaction_id,
        o.original_transaction_id, o.environment, o.failure_code, o.created_at, o.updated_at
        """

    static func order(_ row: PostgresRow) throws -> StoredOrder {
        StoredOrder(
            orderNo: try row.decode("order_no"), productID: try row.decode("product_id"),
            appAccountToken: try row.decode("token", as: String?.self), status: try row.decodeValue("status"),
            type: try row.decodeValue("order_type"), transactionID: try row.decode("transaction_id", as: String?.self),
            originalTransactionID: try row.decode("original_transaction_id", as: String?.self),
            environment: try row.decode("environment", as: String?.self),
            failureCode: try row.decode("failure_code", as: String?.self), createdAt: try row.decode("created_at"),
            updatedAt: try row.decode("updated_at"))
    }

    /// The user's order (nil for an unknown order or another user's).
    public func order(_ orderNo: String, userID: String) async throws -> StoredOrder? {
        try await pool.query(
            "SELECT \(sql: Self.columns) FROM payment_order o WHERE o.order_no = \(orderNo) AND o.user_id = \(userID)"
        ).first.map(Self.order)
    }

    /// Creates the order `request` asks for, as `OrderCreation` decides from the stored state,
    /// or answers the one made for the same request before. The user's row is locked first, so
    /// "one open order per group" holds under concurrent clicks.
    public func create(_ request: OrderRequest) async throws -> OrderCreationOutcome {
        try await pool.transaction(maxAttempts: 3) { db in
            let product = try await db.query(
                """
                SELECT \(sql: Self.productColumns) FROM payment_product
                 WHERE channel = 'APPLE' AND app_key = \(request.appKey) AND product_id = \(request.productID)
                   AND enabled AND NOT deleted
                """
            ).first.map(Self.product)
            var inputs = OrderCreation.Inputs(
                requestedProductID: request.productID, product: product, now: request.now, openOrderWindow: request.openOrderWindow)
            if let product {
                try await UserStore.ensureUser(request.userID, on: db)
                try await UserStore.lockUser(request.userID, on: db)
                inputs.sameRequest = try await db.query(
                    """
                    SELECT order_no, product_id, status, created_at FROM payment_order
                     WHERE user_id = \(request.userID) AND request_id = \(request.requestID)
                    """
                ).first.map(Self.existing)
                inputs.currentProductID = try await SubscriptionStore.currentProduct(
                    userID: request.userID, group: product.subscriptionGroupID, appKey: request.appKey, on: db)
                if let current = inputs.currentProductID {
                    inputs.currentProduct = try await db.query(
                        """
                        SELECT \(sql: Self.productColumns) FROM payment_product
                         WHERE channel = 'APPLE' AND app_key = \(request.appKey) AND product_id = \(current)
                        """
                    ).first.map(Self.product)
                }
                inputs.openOrders = try await db.query(
                    """
                    SELECT order_no, product_id, status, created_at FROM payment_order
                     WHERE user_id = \(request.userID) AND subscription_group_id = \(product.subscriptionGroupID)
                       AND order_type = ANY(\(PostgresArray(OrderCreation.clientTypes.map(\.rawValue)))::text[])
                       AND status = ANY(\(PostgresArray(Self.openStatuses))::text[])
                    """
                ).map(Self.existing)
            }
            switch OrderCreation.decide(inputs) {
            case .refuse(let refusal):
                return .refused(refusal)
            case .replay(let orderNo):
                return .replayed(try await Self.load(orderNo, on: db))
            case .create(let type, let superseded):
                for order in superseded {
                    try await Self.move(order.orderNo, from: order.status, to: .expired, cause: "order.superseded", on: db)
                }
                try await UserStore.ensureAccountToken(request.userID, on: db)
                let inserted = try await db.query(
                    """
                    INSERT INTO payment_order
                        (order_no, user_id, product_id, subscription_group_id, request_id, order_type, status,
                         requested_environment, app_account_token)
                    SELECT \(request.newOrderNo), \(request.userID), \(request.productID), \(product?.subscriptionGroupID),
                           \(request.requestID), \(type.rawValue), \(OrderStatus.created.rawValue), \(request.environment),
                           t.app_account_token
                      FROM user_account_token t WHERE t.user_id = \(request.userID)
                    RETURNING order_no
                    """)
                guard inserted.count == 1 else { throw OrderNotCreated() }
                try await Self.recordHistory(
                    request.newOrderNo, from: nil, to: .created, cause: "client.create", on: db)
                return .created(try await Self.load(request.newOrderNo, on: db))
            }
        }
    }

    /// Moves the user's order to what the client reports (intent only: a charge Apple confirms
    /// later still wins); a repeated report answers the order as it is.
    public func reportByClient(_ orderNo: String, userID: String, moving target: OrderStatus, cause: String) async throws
        -> ClientReportOutcome
    {
        try await pool.transaction { db in
            guard
                let row = try await db.query(
                    """
                    SELECT \(sql: Self.columns) FROM payment_order o
                     WHERE o.order_no = \(orderNo) AND o.user_id = \(userID) FOR UPDATE
                    """
                ).first
            else { return .notFound }
            let order = try Self.order(row)
            if order.status == target { return .answered(order) }
            guard order.status.canMove(to: target) else { return .refused(order) }
            try await Self.move(orderNo, from: order.status, to: target, cause: cause, on: db)
            return .answered(try await Self.load(orderNo, on: db))
        }
    }

    /// Ends the user's order FAILED for a verified transaction the ingress refused for it before
    /// storing anything (another product, a period already over), with its history row and
    /// `order.failed` in one transaction; an order final or linked already is left as it is.
    public func failForUpload(
        _ orderNo: String, userID: String, code: OrderFailureCode, reason: String, transactionID: String, environment: String,
        now: Date
    ) async throws {
        try await pool.transaction { db in
            guard
                let row = try await db.query(
                    """
                    SELECT \(sql: Self.columns), o.user_id FROM payment_order o
                     WHERE o.order_no = \(orderNo) AND o.user_id = \(userID) FOR UPDATE
                    """
                ).first
            else { return }
            let stored = try Self.order(row)
            let order = OrderRecord(
                orderNo: stored.orderNo, userID: userID, productID: stored.productID, type: stored.type, status: stored.status,
                transactionID: stored.transactionID, createdAt: stored.createdAt)
            guard
                let failure = FulfillmentPlanner.failure(
                    of: order, code: code, reason: reason, transactionID: transactionID, environment: environment)
            else { return }
            try await Self.fail(failure, cause: "client.upload", kind: nil, eventID: nil, on: db)
            try await OutboundEventStore(pool: pool).append(FulfillmentEvents.failed(failure, now: now), on: db)
        }
    }

    /// The order a transaction fulfilled, if any.
    public func fulfilledOrderNo(environment: String, transactionID: String) async throws -> String? {
        try await pool.query(
            """
            SELECT order_no FROM payment_order
             WHERE environment = \(environment) AND transaction_id = \(transactionID)
               AND status = \(OrderStatus.fulfilled.rawValue)
            """
        ).first?.decode("order_no")
    }

    /// The order linked to a transaction, whatever its status.
    public func linkedOrder(environment: String, transactionID: String) async throws -> (orderNo: String, status: OrderStatus)? {
        try await pool.query(
            "SELECT order_no, status FROM payment_order WHERE environment = \(environment) AND transaction_id = \(transactionID)"
        ).first.map { (try $0.decode("order_no"), try $0.decodeValue("status")) }
    }

    /// Moves client-created orders still open after `age` to EXPIRED, the transition the order
    /// state machine allows them, with a status-history row; returns how many. Safe with many
    /// callers: rows are taken with SKIP LOCKED, and an order being linked right now (locked) is
    /// left for the next pass.
    public func expireStale(olderThan age: Duration, batch: Int = 500) async throws -> Int {
        let open = OrderStatus.allCases.filter { $0.isOpen && $0.canMove(to: .expired) }.map(\.rawValue)
        var total = 0
        while true {
            let expired = try await pool.query(
                """
                WITH stale AS (
                    SELECT id, status FROM payment_order
                     WHERE status = ANY(\(PostgresArray(open))::text[])
                       AND order_type = ANY(\(PostgresArray(OrderCreation.clientTypes.map(\.rawValue)))::text[])
                       AND created_at < now() - make_interval(secs => \(age.inSeconds))
                     ORDER BY created_at LIMIT \(batch) FOR UPDATE SKIP LOCKED
                ), moved AS (
                    UPDATE payment_order o SET status = \(OrderStatus.expired.rawValue), updated_at = now()
                      FROM stale WHERE o.id = stale.id
                    RETURNING o.order_no, stale.status AS previous
                )
                INSERT INTO status_history (entity_type, entity_key, previous_status, current_status, cause)
                SELECT \(Self.historyEntity), order_no, previous, \(OrderStatus.expired.rawValue), 'order.stale' FROM moved
                """
            ).affectedRows
            total += expired
            if expired < batch { return total }
        }
    }

    // MARK: - The fulfillment statement's parts (one statement per batch of events, for speed)

    /// An order a fact fulfils, with the verified transaction's price and token when it is the
    /// event's own.
    public struct FulfilledOrder: Sendable {
        public var change: OrderChange
        public var price: Int64?
        public var currency: String?
        public var appAccountToken: UUID?
        public var user: String?

        public init(change: OrderChange, price: Int64?, currency: String?, appAccountToken: UUID?, user: String?) {
            self.change = change
            self.price = price
            self.currency = currency
            self.appAccountToken = appAccountToken
            self.user = user
        }
    }

    /// A status change of an order or a subscription, with the event that caused it.
    public struct HistoryEntry: Sendable {
        public var change: StatusChange
        public var cause: String
        public var kind: String
        public var eventID: Int64

        public init(change: StatusChange, cause: String, kind: String, eventID: Int64) {
            self.change = change
            self.cause = cause
            self.kind = kind
            self.eventID = eventID
        }
    }

    /// Marks the users' open orders FULFILLED by their transactions (`RETURNING 1`).
    public static func fulfil(_ orders: [FulfilledOrder]) -> PostgresQuery {
        """
        UPDATE payment_order o
           SET status = \(OrderStatus.fulfilled.rawValue), transaction_id = l.transaction_id,
               original_transaction_id = l.original, environment = l.environment, amount_milliunits = l.price,
               currency = l.currency, failure_code = NULL, updated_at = now()
          FROM unnest(\(PostgresArray(orders.map(\.change.order.orderNo)))::text[],
                      \(PostgresArray(orders.map(\.change.order.transactionID)))::text[],
                      \(PostgresArray(orders.map(\.change.originalTransactionID)))::text[],
                      \(PostgresArray(orders.map(\.change.environment)))::text[],
                      \(PostgresArray(orders.map(\.price)))::bigint[],
                      \(PostgresArray(orders.map(\.currency)))::text[])
               AS l(order_no, transaction_id, original, environment, price, currency)
         WHERE o.order_no = l.order_no
        RETURNING 1
        """
    }

    /// Orders a fact creates (renewals, changes, recoveries): born FULFILLED; one already made by
    /// an earlier attempt is left as it is.
    public static func insertFulfilled(_ orders: [FulfilledOrder]) -> PostgresQuery {
        let insert = BatchInsert(
            into: "payment_order",
            [
                .init("order_no", "text[]", orders.map(\.change.order.orderNo)),
                .init("user_id", "text[]", orders.map(\.user)),
                .init("product_id", "text[]", orders.map(\.change.order.productID)),
                .init("subscription_group_id", "text[]", orders.map(\.change.subscriptionGroupID)),
                .init("order_type", "text[]", orders.map(\.change.order.type.rawValue)),
                .init("status", "text[]", orders.map { _ in OrderStatus.fulfilled.rawValue }),
                .init("transaction_id", "text[]", orders.map(\.change.order.transactionID)),
                .init("original_transaction_id", "text[]", orders.map(\.change.originalTransactionID)),
                .init("environment", "text[]", orders.map(\.change.environment)),
                .init("amount_milliunits", "bigint[]", orders.map(\.price)),
                .init("currency", "text[]", orders.map(\.currency)),
                .init("app_account_token", "uuid[]", orders.map(\.appAccountToken)),
            ], conflict: .doNothing)
        return "\(insert)"
    }

    /// The status changes of orders and subscriptions an event made.
    public static func appendHistory(_ entries: [HistoryEntry]) -> PostgresQuery {
        let insert = BatchInsert(
            into: "status_history",
            [
                .init("entity_type", "text[]", entries.map(\.change.entity.rawValue)),
                .init("entity_key", "text[]", entries.map(\.change.key)),
                .init("previous_status", "text[]", entries.map(\.change.previous)),
                .init("current_status", "text[]", entries.map(\.change.current)),
                .init("cause", "text[]", entries.map(\.cause)),
                .init("event_kind", "text[]", entries.map(\.kind)),
                .init("event_id", "bigint[]", entries.map(\.eventID)),
            ], conflict: .none)
        return "\(insert)"
    }

    /// Ends an order FAILED with its stable code (`OrderFailureCode`) and a status-history row
    /// naming the event; an order final or linked to a transaction by now is left as it is.
    public static func fail(
        _ failure: OrderFailure, cause: String, kind: String?, eventID: Int64?, on db: PostgresConnection
    ) async throws {
        let final = OrderStatus.allCases.filter(\.isFinal).map(\.rawValue)
        try await db.query(
            """
            WITH before AS (
                SELECT id, status FROM payment_order
                 WHERE order_no = \(failure.order.orderNo) AND transaction_id IS NULL
                   AND status <> ALL(\(PostgresArray(final))::text[])
                   FOR UPDATE
            ), failed AS (
                UPDATE payment_order o
                   SET status = \(OrderStatus.failed.rawValue), failure_code = \(failure.code.rawValue), updated_at = now()
                  FROM before WHERE o.id = before.id
                RETURNING o.order_no, before.status AS previous
            )
            INSERT INTO status_history (entity_type, entity_key, previous_status, current_status, cause, event_kind, event_id)
            SELECT \(historyEntity), order_no, previous, \(OrderStatus.failed.rawValue), \(cause), \(kind), \(eventID) FROM failed
            """)
    }

    /// Subscriptions' changes of status that no event caused (the clock's), with their `cause`.
    public static func appendSubscriptionHistory(
        _ changes: [(key: String, previous: String, current: String)], cause: String, on db: PostgresConnection
    ) async throws {
        guard !changes.isEmpty else { return }
        try await db.query(
            """
            INSERT INTO status_history (entity_type, entity_key, previous_status, current_status, cause)
            SELECT 'SUBSCRIPTION', c.key, c.previous, c.current, \(cause)
              FROM unnest(\(PostgresArray(changes.map(\.key)))::text[], \(PostgresArray(changes.map(\.previous)))::text[],
                          \(PostgresArray(changes.map(\.current)))::text[]) AS c(key, previous, current)
            """)
    }

    // MARK: - Statements shared by the operations above

    static let openStatuses = OrderStatus.allCases.filter(\.isOpen).map(\.rawValue)
    /// `status_history.entity_type` of orders.
    static let historyEntity = "ORDER"

    static let productColumns: StaticString = "product_id, subscription_group_id, kind, plan_level, duration"

    private static func product(_ row: PostgresRow) throws -> OrderCreation.Product {
        OrderCreation.Product(
            productID: try row.decode("product_id"), subscriptionGroupID: try row.decode("subscription_group_id"),
            kind: ProductKind(rawValue: try row.decode("kind")) ?? .autoRenewable, planLevel: try row.decode("plan_level"),
            duration: ProductDuration(catalogueValue: try row.decode("duration")) ?? .month)
    }

    private static func existing(_ row: PostgresRow) throws -> OrderCreation.ExistingOrder {
        OrderCreation.ExistingOrder(
            orderNo: try row.decode("order_no"), productID: try row.decode("product_id"), status: try row.decodeValue("status"),
            createdAt: try row.decode("created_at"))
    }

    private static func load(_ orderNo: String, on db: PostgresConnection) async throws -> StoredOrder {
        guard let row = try await db.query("SELECT \(sql: columns) FROM payment_order o WHERE o.order_no = \(orderNo)").first
        else { throw OrderNotCreated() }
        return try order(row)
    }

    private static func move(
        _ orderNo: String, from: OrderStatus, to: OrderStatus, cause: String, on db: PostgresConnection
    ) async throws {
        try await db.query("UPDATE payment_order SET status = \(to.rawValue), updated_at = now() WHERE order_no = \(orderNo)")
        try await recordHistory(orderNo, from: from, to: to, cause: cause, on: db)
    }

    static func recordHistory(
        _ orderNo: String, from: OrderStatus?, to: OrderStatus, cause: String, on db: PostgresConnection
    ) async throws {
        try await db.query(
            """
            INSERT INTO status_history (entity_type, entity_key, previous_status, current_status, cause)
            VALUES (\(historyEntity), \(orderNo), \(from?.rawValue), \(to.rawValue), \(cause))
            """)
    }
}

/// The order row just written could not be read back (never expected: a broken invariant).
public struct OrderNotCreated: Error, CustomStringConvertible {
    public var description: String { "the order was not created" }
}

extension PostgresRow {
    /// A text column as one of the values of a string enum; an unknown value is a decoding error.
    func decodeValue<T: RawRepresentable>(_ column: String, as type: T.Type = T.self) throws -> T where T.RawValue == String {
        let raw: String = try decode(column)
        guard let value = T(rawValue: raw) else {
            throw PostgresError.decoding(column: column, reason: "a value \(T.self) does not know")
        }
        return value
    }
}
