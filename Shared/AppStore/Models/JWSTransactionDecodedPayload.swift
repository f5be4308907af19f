import Foundation

/// The decoded payload of a signed transaction.
///
/// [JWSTransactionDecodedPayload](https://developer.apple.com/documentation/appstoreserverapi/jwstransactiondecodedpayload)
public struct JWSTransactionDecodedPayload: Codable, Hashable, Sendable {
    public var originalTransactionId: String?
    public var transactionId: String?
    public var webOrderLineItemId: String?
    public var bundleId: String?
    public var productId: String?
    public var subscriptionGroupIdentifier: String?
    public var purchaseDate: Date?
    public var originalPurchaseDate: Date?
    public var expiresDate: Date?
    public var quantity: Int32?
    public var rawType: String?
    /// [type](https://developer.apple.com/documentation/appstoreserverapi/type)
    public var type: ProductType? {
        get { rawType.flatMap(ProductType.init(rawValue:)) }
        set { rawType = newValue?.rawValue }
    }
    /// Kept as text so a malformed token cannot make a genuine transaction undecodable.
    public var rawAppAccountToken: String?
    /// [appAccountToken](https://developer.apple.com/documentation/appstoreserverapi/appaccounttoken)
    public var appAccountToken: UUID? {
        get { rawAppAccountToken.flatMap(UUID.init(uuidString:)) }
        set { rawAppAccountToken = newValue?.uuidString.lowercased() }
    }
    public var rawInAppOwnershipType: String?
    /// [inAppOwnershipType](https://developer.apple.com/documentation/appstoreserverapi/inappownershiptype)
    public var inAppOwnershipType: InAppOwnershipType? {
        get { rawInAppOwnershipType.flatMap(InAppOwnershipType.init(rawValue:)) }
        set { rawInAppOwnershipType = newValue?.rawValue }
    }
    public var signedDate: Date?
    public var rawRevocationReason: Int32?
    /// [revocationReason](https://developer.apple.com/documentation/appstoreserverapi/revocationreason)
    public var revocationReason: RevocationReason? {
        get { rawRevocationReason.flatMap(RevocationReason.init(rawValue:)) }
        set { rawRevocationReason = newValue?.rawValue }
    }
    public var revocationDate: Date?
    public var rawRevocationType: String?
    /// [revocationType](https://developer.apple.com/documentation/appstoreserverapi/revocationtype)
    public var revocationType: RevocationType? {
        get { rawRevocationType.flatMap(RevocationType.init(rawValue:)) }
        set { rawRevocationType = newValue?.rawValue }
    }
    /// Refunded share in milli-percent (0...100000) for prorated refunds.
    public var revocationPercentage: Int32?
    public var isUpgraded: Bool?
    public var rawOfferType: Int32?
    /// [offerType](https://developer.apple.com/documentation/appstoreserverapi/offertype)
    public var offerType: OfferType? {
        get { rawOfferType.flatMap(OfferType.init(rawValue:)) }
        set { rawOfferType = newValue?.rawValue }
    }
    public var offerIdentifier: String?
    /// ISO 8601 duration of the offer, e.g. `P1M`.
    public var offerPeriod: String?
    public var rawOfferDiscountType: String?
    /// [offerDiscountType](https://developer.apple.com/documentation/appstoreserverapi/offerdiscounttype)
    public var offerDiscountType: OfferDiscountType? {
        get { rawOfferDiscountType.flatMap(OfferDiscountType.init(rawValue:)) }
        set { rawOfferDiscountType = newValue?.rawValue }
    }
    public var rawEnvironment: String?
    /// [environment](https://developer.apple.com/documentation/appstoreserverapi/environment)
    public var environment: AppStoreEnvironment? {
        get { rawEnvironment.flatMap(AppStoreEnvironment.init(rawValue:)) }
        set { rawEnvironment = newValue?.rawValue }
    }
    public var storefront: String?
    public var storefrontId: String?
    public var rawTransactionReason: String?
    /// [transactionReason](https://developer.apple.com/documentation/appstoreserverapi/transactionreason)
    public var transactionReason: TransactionReason? {
        get { rawTransactionReason.flatMap(TransactionReason.init(rawValue:)) }
        set { rawTransactionReason = newValue?.rawValue }
    }
    /// ISO 4217 currency code of `price`.
    public var currency: String?
    /// Price in milliunits of `currency` (never a floating-point amount).
    public var price: Int64?
    public var appTransactionId: String?
    public var rawBillingPlanType: String?
    /// [billingPlanType](https://developer.apple.com/documentation/appstoreserverapi/billingplantype)
    public var billingPlanType: BillingPlanType? {
        get { rawBillingPlanType.flatMap(BillingPlanType.init(rawValue:)) }
        set { rawBillingPlanType = newValue?.rawValue }
    }
    /// Set on the monthly charges of a commitment plan.
    public var commitmentInfo: TransactionCommitmentInfo?

    public init() {}

    enum CodingKeys: String, CodingKey {
        case originalTransactionId, transactionId, webOrderLineItemId, bundleId, productId, subscriptionGroupIdentifier
        case purchaseDate, originalPurchaseDate, expiresDate, quantity
        case rawType = "type"
        case rawAppAccountToken = "appAccountToken"
        case rawInAppOwnershipType = "inAppOwnershipType"
        case signedDate
        case rawRevocationReason = "revocationReason"
        case revocationDate
        case rawRevocationType = "revocationType"
        case revocationPercentage, isUpgraded
        case rawOfferType = "offerType"
        case offerIdentifier, offerPeriod
        case rawOfferDiscountType = "offerDiscountType"
        case rawEnvironment = "environment"
        case storefront, storefrontId
        case rawTransactionReason = "transactionReason"
        case currency, price, appTransactionId
        case rawBillingPlanType = "billingPlanType"
        case commitmentInfo
    }
}
