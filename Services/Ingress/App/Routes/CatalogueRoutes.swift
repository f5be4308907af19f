import AppStore
import Catalogue
import Domain
import HTTPServer
import ServiceRuntime
import Storage

/// `GET /api/v1/subscriptions/products`: the products on offer and how each relates to the
/// caller's current plan in its group, so the app can label buttons (upgrade now, downgrade at
/// the next renewal…) without knowing Apple's level rules.
struct CatalogueRoutes: Sendable {
    let catalogue: CatalogueStore
    let subscriptions: SubscriptionStore
    /// The app whose products are on offer (the bundle id).
    let appKey: String
    let clock: any WallClock

    func register(in api: inout RouterGroup<IngressRequestContext>) {
        api.get("subscriptions/products") { _, context in try await products(user: try context.requireUser()) }
    }

    /// A product; a credit pack (CONSUMABLE) has no level, duration, group or change timing.
    struct ProductView: Encodable, Sendable {
        let productId: String
        let kind: ProductKind
        let planCode: String
        @ExplicitNull var planLevel: Int?
        @ExplicitNull var duration: ProductDuration?
        let creditsAmount: Int64
        let permanentCredits: Int64
        /// Null for a credit pack, which Apple bills once.
        @ExplicitNull var billingPlanType: BillingPlan?
        @ExplicitNull var subscriptionGroupId: String?
        let relation: PlanRelation
        @ExplicitNull var changeTiming: ChangeTiming?
    }

    struct Products: Encodable, Sendable {
        let products: [ProductView]
    }

    func products(user: AuthenticatedUser) async throws -> HTTPResponse {
        let products = try await catalogue.products(appKey: appKey)
        let subscriptions = try await subscriptions.subscriptions(userID: user.userID)
        // All known products, disabled ones included: a withdrawn product can still be someone's plan.
        let byID = Dictionary(products.map { ($0.productID, $0) }) { first, _ in first }
        let now = clock.now()
        var current: [String: CatalogueProduct] = [:]
        // Rows come latest expiry first, so the first plan with service in a group is the current one.
        for subscription in subscriptions where subscription.status(at: now).hasService {
            guard let product = byID[subscription.activeProductID], current[product.subscriptionGroupID] == nil else { continue }
            current[product.subscriptionGroupID] = product
        }
        let offered = products.filter(\.enabled).map { product in
            guard product.kind == .autoRenewable else {
                return ProductView(
                    productId: product.productID, kind: product.kind, planCode: product.planCode, planLevel: nil, duration: nil,
                    creditsAmount: 0, permanentCredits: product.permanentCredits, billingPlanType: nil, subscriptionGroupId: nil,
                    relation: .new,
                    changeTiming: nil)
            }
            let plan = current[product.subscriptionGroupID]
            return ProductView(
                productId: product.productID, kind: product.kind, planCode: product.planCode, planLevel: product.planLevel,
                duration: product.duration, creditsAmount: product.creditsAmount, permanentCredits: 0,
                billingPlanType: product.billingPlan, subscriptionGroupId: product.subscriptionGroupID,
                relation: PlanRelation.between(current: plan, candidate: product),
                changeTiming: ChangeTiming.of(current: plan, candidate: product))
        }
        return .json(Products(products: offered))
    }
}
