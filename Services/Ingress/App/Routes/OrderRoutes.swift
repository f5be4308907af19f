import AppStore
import Crypto
import Domain
import Foundation
import HTTPServer
import Postgres
import ServiceRuntime

/// Purchase orders: the business intent behind a StoreKit purchase.
///
/// `POST /api/v1/subscriptions/orders` creates one (idempotent per user and requestId), `GET …/{orderNo}`
/// reads it, `POST …/{orderNo}/cancel` records the client's report that the user cancelled, and
/// `POST …/{orderNo}/pending` its report that StoreKit answered `.pending` (Ask to Buy, payment to
/// fix): the order then waits for the charge and a second purchase in its group is refused with
/// PURCHASE_PENDING.
struct OrderRoutes: Sendable {
    let context: IngressContext

    func register(in router: inout Router) {
        router.post("/api/v1/subscriptions/orders") { request in try await create(request) }
        router.get("/api/v1/subscriptions/orders/{orderNo}") { request in try await read(request) }
        router.post("/api/v1/subscriptions/orders/{orderNo}/cancel") { request in
            try await clientReport(request, moving: .cancelled, cause: "client.cancel")
        }
        router.post("/api/v1/subscriptions/orders/{orderNo}/pending") { request in
            try await clientReport(request, moving: .pending, cause: "client.pending")
        }
    }

    struct CreateBody: Decodable {
        let productId: String
        let requestId: String?
    }

    /// An order as clients see it; fields without a value are written as null.
    struct OrderView: Encodable {
        let orderNo: String
        let productId: String
        @ExplicitNull var appAccountToken: String?
        let status: String
        let orderType: String
        @ExplicitNull var transactionId: String?
        @ExplicitNull var originalTransactionId: String?
        @ExplicitNull var environment: String?
        @ExplicitNull var failureCode: String?
        let createdAt: Date
        let updatedAt: Date
    }

    static let orderColumns: StaticString = """
        o.order_no, o.product_id, o.app_account_token::text AS token, o.status, o.order_type, o.transaction_id,
        o.original_transaction_id, o.environment, o.failure_code, o.created_at, o.updated_at
        """

    static func view(_ row: PostgresRow) throws -> OrderView {
        OrderView(
            orderNo: try row.decode("order_no"), productId: try row.decode("product_id"),
            appAccountToken: try row.decode("token", as: String?.self), status: try row.decode("status"),
            orderType: try row.decode("order_type"), transactionId: try row.decode("transaction_id", as: String?.self),
            originalTransactionId: try row.decode("original_transaction_id", as: String?.self),
            environment: try row.decode("environment", as: String?.self),
            failureCode: try row.decode("failure_code", as: String?.self), createdAt: try row.decode("created_at"),
            updatedAt: try row.decode("updated_at"))
    }

    func create(_ request: HTTPRequest) async throws -> HTTPResponse {
        let user = try context.authenticator.authenticate(request)
        let body = try request.decodeJSON(CreateBody.self)
        // requestId is the idempotency key of the contract; the Idempotency-Key header stands in
        // when it is missing. A client may send both with different values (one per click each):
        // requestId then wins rather than refusing the purchase.
        guard let requestID = body.requestId ?? request.header("idempotency-key"),
            Self.isAcceptableIdentifier(requestID, maxLength: 128)
        else {
            throw APIError.invalidRequest("requestId (or an Idempotency-Key header) of at most 128 characters is required")
        }
        guard Self.isAcceptableIdentifier(body.productId, maxLength: 255) else {
            throw APIError.invalidRequest("productId is required (at most 255 printable characters)")
        }
        let bundleID = context.configuration.appStore.bundleId
        let environment = context.configuration.appStore.environment.rawValue

        return try await APIError.databaseCall {
            try await context.pool.transaction(maxAttempts: 3) { db in
                guard
                    let productRow = try await db.query(
                        """
                        SELECT product_id, subscription_group_id, plan_level, duration FROM payment_product
                         WHERE channel = 'APPLE' AND app_key = \(bundleID) AND product_id = \(body.productId)
                           AND enabled AND NOT deleted
                        """
                    ).first
                else { throw APIError.productUnavailable("the product is not on sale") }
                let group: String = try productRow.decode("subscription_group_id")

                try await db.query("INSERT INTO app_user (user_id) VALUES (\(user.userID)) ON CONFLICT DO NOTHING")
                // Serialises this user's order creation, so "one open order" holds under concurrent clicks.
                try await db.query("SELECT user_id FROM app_user WHERE user_id = \(user.userID) FOR UPDATE")

                if let existing = try await db.query(
                    "SELECT \(sql: Self.orderColumns) FROM payment_order o WHERE o.user_id = \(user.userID) AND o.request_id = \(requestID)"
                ).first {
                    let order = try Self.view(existing)
                    guard order.productId == body.productId else {
                        throw APIError.orderConflict("this requestId was used for another product")
                    }
                    return .json(order, status: 200)
                }

                let current = try await db.query(
                    """
                    SELECT s.active_product_id, s.status, s.expires_at, s.grace_expires_at, p.plan_level
                      FROM user_subscription s
                      JOIN payment_product p ON p.product_id = s.active_product_id AND p.app_key = \(bundleID)
                     WHERE s.user_id = \(user.userID) AND p.subscription_group_id = \(group)
                       AND s.status IN ('ACTIVE', 'GRACE') AND NOT s.is_family_shared
                       AND (s.expires_at IS NULL OR s.expires_at > now() OR s.grace_expires_at > now())
                     ORDER BY s.expires_at DESC NULLS FIRST LIMIT 1
                    """
                ).first
                var orderType = OrderType.initial
                if let current {
                    let activeProduct: String = try current.decode("active_product_id")
                    if activeProduct == body.productId {
                        throw APIError.orderConflict("the user already has this subscription")
                    }
                    orderType = .change
                }
                let open = try await db.query(
                    """
                    SELECT order_no, status, created_at FROM payment_order
                     WHERE user_id = \(user.userID) AND subscription_group_id = \(group)
                       AND order_type IN ('INITIAL', 'CHANGE') AND status IN ('CREATED', 'PENDING')
                    """)
                for row in open {
                    let status: String = try row.decode("status")
                    let created: Date = try row.decode("created_at")
                    if status == OrderStatus.pending.rawValue {
                        throw APIError.purchasePending("a purchase in this group is waiting for approval")
                    }
                    if context.clock.now().timeIntervalSince(created) < context.configuration.openOrderWindow {
                        throw APIError.orderConflict("another purchase in this group is open: finish or cancel it first")
                    }
                    let orderNo: String = try row.decode("order_no")
                    try await db.query(
                        "UPDATE payment_order SET status = 'EXPIRED', updated_at = now() WHERE order_no = \(orderNo)")
                    try await Self.history(db, orderNo: orderNo, from: status, to: OrderStatus.expired.rawValue, cause: "order.superseded")
                }

                try await db.query(
                    """
                    INSERT INTO user_account_token (user_id, app_account_token) VALUES (\(user.userID), gen_random_uuid())
                    ON CONFLICT (user_id) DO NOTHING
                    """)
                let orderNo = Self.newOrderNumber(now: context.clock.now())
                let inserted = try await db.query(
                    """
                    INSERT INTO payment_order
                        (order_no, user_id, product_id, subscription_group_id, request_id, order_type, status,
                         requested_environment, app_account_token)
                    SELECT \(orderNo), \(user.userID), \(body.productId), \(group), \(requestID), \(orderType.rawValue),
                           'CREATED', \(environment), t.app_account_token
                      FROM user_account_token t WHERE t.user_id = \(user.userID)
                    RETURNING order_no
                    """)
                guard inserted.count == 1 else { throw APIError.serviceUnavailable("order not created") }
                try await Self.history(db, orderNo: orderNo, from: nil, to: OrderStatus.created.rawValue, cause: "client.create")
                let row = try await db.query(
                    "SELECT \(sql: Self.orderColumns) FROM payment_order o WHERE o.order_no = \(orderNo)")
                return .json(try Self.view(row.first!), status: 201)
            }
        }
    }

    func read(_ request: HTTPRequest) async throws -> HTTPResponse {
        let user = try context.authenticator.authenticate(request)
        let orderNo = request.pathParameter("orderNo") ?? ""
        return try await APIError.databaseCall {
            guard
                let row = try await context.pool.query(
                    "SELECT \(sql: Self.orderColumns) FROM payment_order o WHERE o.order_no = \(orderNo) AND o.user_id = \(user.userID)"
                ).first
            else { throw APIError.notFound("no such order") }
            return .json(try Self.view(row))
        }
    }

    /// Moves the user's order to what the client reports (intent only: a charge Apple confirms
    /// later still wins); repeating a report answers the order as it is.
    func clientReport(_ request: HTTPRequest, moving target: OrderStatus, cause: String) async throws -> HTTPResponse {
        let user = try context.authenticator.authenticate(request)
        let orderNo = request.pathParameter("orderNo") ?? ""
        return try await APIError.databaseCall {
            try await context.pool.transaction { db in
                guard
                    let row = try await db.query(
                        """
                        SELECT \(sql: Self.orderColumns) FROM payment_order o
                         WHERE o.order_no = \(orderNo) AND o.user_id = \(user.userID) FOR UPDATE
                        """
                    ).first
                else { throw APIError.notFound("no such order") }
                let order = try Self.view(row)
                if order.status == target.rawValue { return .json(order) }
                guard let status = OrderStatus(rawValue: order.status), status.canMove(to: target) else {
                    throw APIError.orderConflict("an order in status \(order.status) cannot become \(target.rawValue)")
                }
                try await db.query(
                    "UPDATE payment_order SET status = \(target.rawValue), updated_at = now() WHERE order_no = \(orderNo)")
                try await Self.history(db, orderNo: orderNo, from: order.status, to: target.rawValue, cause: cause)
                let updated = try await db.query(
                    "SELECT \(sql: Self.orderColumns) FROM payment_order o WHERE o.order_no = \(orderNo)")
                return .json(try Self.view(updated.first!))
            }
        }
    }

    static func history(_ db: PostgresConnection, orderNo: String, from: String?, to: String, cause: String) async throws {
        try await db.query(
            """
            INSERT INTO status_history (entity_type, entity_key, previous_status, current_status, cause)
            VALUES ('ORDER', \(orderNo), \(from), \(to), \(cause))
            """)
    }

    /// `PAY` + UTC date and time + 8 random digits: sortable by creation, unguessable enough to not
    /// enumerate (reads check the owner anyway).
    static func newOrderNumber(now: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let c = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: now)
        let stamp = String(
            format: "%04d%02d%02d%02d%02d%02d", c.year!, c.month!, c.day!, c.hour!, c.minute!, c.second!)
        let random = SecureRandom.bytes(8).map { String($0 % 10) }.joined()
        return "PAY\(stamp)\(random)"
    }

    /// Identifiers clients send (request ids, product ids): bounded, without control characters.
    static func isAcceptableIdentifier(_ text: String, maxLength: Int) -> Bool {
        !text.isEmpty && text.count <= maxLength
            && text.unicodeScalars.allSatisfy { !$0.properties.generalCategory.isControlOrFormat }
    }
}

extension Unicode.GeneralCategory {
    /// Control (Cc) and format (Cf) characters: invisible, never part of an identifier.
    var isControlOrFormat: Bool { self == .control || self == .format }
}
