import Foundation

/// The order-creation policy of `POST /api/v1/subscriptions/orders`: from what is stored about
/// the user when they click "buy", whether to create an order (and of which type), answer the
/// one already created for the same request, or refuse; and which open orders a new one
/// supersedes. Pure: the caller gathers the inputs in its transaction and applies the decision.
public enum OrderCreation {
    /// The product asked for, as the catalogue has it on sale.
    public struct Product: Sendable, Equatable {
        public var productID: String
        public var subscriptionGroupID: String
        public var kind: ProductKind
        /// Apple's level in the group (1 is the highest) and the paid period: when a change applies.
        public var planLevel: Int
        public var duration: ProductDuration

        public init(
            productID: String, subscriptionGroupID: String, kind: ProductKind = .autoRenewable, planLevel: Int = 1,
            duration: ProductDuration = .month
        ) {
            self.productID = productID
            self.subscriptionGroupID = subscriptionGroupID
            self.kind = kind
            self.planLevel = planLevel
            self.duration = duration
        }
    }

    /// An order of the user that may bear on the new one.
    public struct ExistingOrder: Sendable, Equatable {
        public var orderNo: String
        public var productID: String
        public var status: OrderStatus
        public var createdAt: Date

        public init(orderNo: String, productID: String, status: OrderStatus, createdAt: Date) {
            self.orderNo = orderNo
            self.productID = productID
            self.status = status
            self.createdAt = createdAt
        }
    }

    /// Everything the decision reads.
    public struct Inputs: Sendable {
        /// The requested product id, as sent.
        public var requestedProductID: String
        /// Nil when the product is not on sale (unknown, disabled or deleted).
        public var product: Product?
        /// The user's order made earlier with the same requestId.
        public var sameRequest: ExistingOrder?
        /// The product of the user's subscription with service in the product's group (not
        /// family shared), if any.
        public var currentProductID: String?
        /// The catalogue row of `currentProductID` (enabled or not: it was sold), to tell when a
        /// change would apply.
        public var currentProduct: Product?
        /// The user's open purchase intents (INITIAL or CHANGE, CREATED or PENDING) in the group.
        public var openOrders: [ExistingOrder]
        public var now: Date
        /// How long a CREATED order blocks another purchase in its group.
        public var openOrderWindow: TimeInterval

        public init(
            requestedProductID: String, product: Product?, sameRequest: ExistingOrder? = nil, currentProductID: String? = nil,
            currentProduct: Product? = nil, openOrders: [ExistingOrder] = [], now: Date, openOrderWindow: TimeInterval
        ) {
            self.requestedProductID = requestedProductID
            self.product = product
            self.sameRequest = sameRequest
            self.currentProductID = currentProductID
            self.currentProduct = currentProduct
            self.openOrders = openOrders
            self.now = now
            self.openOrderWindow = openOrderWindow
        }
    }

    /// Why no order is created.
    public enum Refusal: Sendable, Equatable {
        /// The product is not on sale.
        case productUnavailable
        /// The requestId was used for another product.
        case requestUsedForAnotherProduct
        /// The user already has this very subscription.
        case alreadySubscribed
        /// A purchase in the group waits for approval (Ask to Buy) or for its payment.
        case purchasePending
        /// A purchase in the group was started within the open-order window.
        case anotherOrderOpen
        /// A change Apple applies at the next renewal (a lower level, or the same level with another
        /// duration): no charge now, so no order; the renewal that applies it gets its RENEWAL order.
        case changeDeferred
    }

    public enum Decision: Sendable, Equatable {
        /// Create an order of this type, after moving `superseding` to EXPIRED.
        case create(OrderType, superseding: [ExistingOrder])
        /// The order made for this request already: answer it again.
        case replay(orderNo: String)
        case refuse(Refusal)
    }

    /// Open orders are looked at in the given order: the first that blocks decides the refusal.
    public static func decide(_ inputs: Inputs) -> Decision {
        guard let product = inputs.product else { return .refuse(.productUnavailable) }
        if let earlier = inputs.sameRequest {
            return earlier.productID == inputs.requestedProductID
                ? .replay(orderNo: earlier.orderNo) : .refuse(.requestUsedForAnotherProduct)
        }
        // A credit pack may be bought again and again, also while another purchase is open: each
        // purchase is its own transaction and grant.
        if product.kind == .consumable { return .create(.initial, superseding: []) }
        var type = OrderType.initial
        if let current = inputs.currentProductID {
            if current == inputs.requestedProductID { return .refuse(.alreadySubscribed) }
            // No transaction could ever complete an order for a deferred change: opened, it would
            // only hold the group with ORDER_CONFLICT until it expired. Apple records it as the
            // renewal preference (`pendingProductId`), and its renewal is a RENEWAL order.
            if let currentProduct = inputs.currentProduct, currentProduct.productID == current,
                currentProduct.subscriptionGroupID == product.subscriptionGroupID,
                ChangeTiming.between(
                    currentLevel: currentProduct.planLevel, currentDuration: currentProduct.duration,
                    candidateLevel: product.planLevel, candidateDuration: product.duration) == .nextRenewal
            {
                return .refuse(.changeDeferred)
            }
            type = .change
        }
        for order in inputs.openOrders {
            if order.status == .pending { return .refuse(.purchasePending) }
            if inputs.now.timeIntervalSince(order.createdAt) < inputs.openOrderWindow { return .refuse(.anotherOrderOpen) }
        }
        return .create(type, superseding: inputs.openOrders)
    }

    /// The order types a client creates (the others come from Apple's charges).
    public static let clientTypes: [OrderType] = [.initial, .change]
}
