import AppStore
import Crypto
import Domain
import Foundation
import HTTPServer
import ServiceRuntime
import Storage

/// Purchase orders: the business intent behind a StoreKit purchase.
///
/// `POST /api/v1/subscriptions/orders` creates one (idempotent per user and requestId), `GET …/{orderNo}`
/// reads it, `POST …/{orderNo}/cancel` records the client's report that the user cancelled, and
/// `POST …/{orderNo}/pending` its report that StoreKit answered `.pending` (Ask to Buy, payment to
/// fix): the order then waits for the charge and a second purchase in its group is refused with
/// PURCHASE_PENDING.
struct OrderRoutes: Sendable {
    let orders: OrderStore
    /// The deployment's app and environment, and how long an unpaid order keeps its group.
    let appStore: AppStoreVerifierConfiguration
    let openOrderWindow: TimeInterval
    let clock: any WallClock

    func register(in api: inout RouterGroup<IngressRequestContext>) {
        api.post("subscriptions/orders") { request, context in try await create(request, user: try context.requireUser()) }
        api.get("subscriptions/orders/{orderNo}") { request, context in try await read(request, user: try context.requireUser()) }
        api.post("subscriptions/orders/{orderNo}/cancel") { request, context in
            try await clientReport(request, user: try context.requireUser(), moving: .cancelled, cause: "client.cancel")
        }
        api.post("subscriptions/orders/{orderNo}/pending") { request, context in
            try await clientReport(request, user: try context.requireUser(), moving: .pending, cause: "client.pending")
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
        let status: OrderStatus
        let orderType: OrderType
        @ExplicitNull var transactionId: String?
        @ExplicitNull var originalTransactionId: String?
        @ExplicitNull var environment: String?
        @ExplicitNull var failureCode: String?
        let createdAt: Date
        let updatedAt: Date

        init(_ order: StoredOrder) {
            orderNo = order.orderNo
            productId = order.productID
            appAccountToken = order.appAccountToken
            status = order.status
            orderType = order.type
            transactionId = order.transactionID
            originalTransactionId = order.originalTransactionID
            environment = order.environment
            failureCode = order.failureCode
            createdAt = order.createdAt
            updatedAt = order.updatedAt
        }
    }

    func create(_ request: HTTPRequest, user: AuthenticatedUser) async throws -> HTTPResponse {
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
        let now = clock.now()
        let outcome: OrderCreationOutcome
        do {
            outcome = try await orders.create(
                OrderRequest(
                    userID: user.userID, productID: body.productId, requestID: requestID,
                    appKey: appStore.bundleId,
                    environment: appStore.environment.rawValue, newOrderNo: Self.newOrderNumber(now: now),
                    now: now, openOrderWindow: openOrderWindow))
        } catch is OrderNotCreated {
            throw APIError.serviceUnavailable("order not created")
        }
        switch outcome {
        case .created(let order): return .json(OrderView(order), status: 201)
        case .replayed(let order): return .json(OrderView(order), status: 200)
        case .refused(let refusal): throw Self.error(for: refusal)
        }
    }

    /// The contract's answer to each refusal of the creation policy.
    static func error(for refusal: OrderCreation.Refusal) -> HTTPError {
        switch refusal {
        case .productUnavailable: APIError.productUnavailable("the product is not on sale")
        case .requestUsedForAnotherProduct: APIError.orderConflict("this requestId was used for another product")
        case .alreadySubscribed: APIError.orderConflict("the user already has this subscription")
        case .purchasePending: APIError.purchasePending("a purchase in this group is waiting for approval")
        case .anotherOrderOpen: APIError.orderConflict("another purchase in this group is open: finish or cancel it first")
        case .changeDeferred:
            APIError.changeDeferred(
                "Apple applies this change at the next renewal: buy it in StoreKit without an order; it shows as pendingProductId")
        }
    }

    func read(_ request: HTTPRequest, user: AuthenticatedUser) async throws -> HTTPResponse {
        guard let order = try await orders.order(request.pathParameter("orderNo") ?? "", userID: user.userID) else {
            throw APIError.notFound("no such order")
        }
        return .json(OrderView(order))
    }

    /// Moves the user's order to what the client reports (intent only: a charge Apple confirms
    /// later still wins); repeating a report answers the order as it is.
    func clientReport(_ request: HTTPRequest, user: AuthenticatedUser, moving target: OrderStatus, cause: String) async throws
        -> HTTPResponse
    {
        let orderNo = request.pathParameter("orderNo") ?? ""
        switch try await orders.reportByClient(orderNo, userID: user.userID, moving: target, cause: cause) {
        case .notFound: throw APIError.notFound("no such order")
        case .answered(let order): return .json(OrderView(order))
        case .refused(let order):
            throw APIError.orderConflict("an order in status \(order.status.rawValue) cannot become \(target.rawValue)")
        }
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
