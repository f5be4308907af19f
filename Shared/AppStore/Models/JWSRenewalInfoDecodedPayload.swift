import Foundation

/// The decoded payload of signed subscription renewal information.
///
/// [JWSRenewalInfoDecodedPayload](https://developer.apple.com/documentation/appstoreserverapi/jwsrenewalinfodecodedpayload)
public struct JWSRenewalInfoDecodedPayload: Codable, Hashable, Sendable {
    public var rawExpirationIntent: Int32?
    /// [expirationIntent](https://developer.apple.com/documentation/appstoreserverapi/expirationintent)
    public var expirationIntent: ExpirationIntent? {
        get { rawExpirationIntent.flatMap(ExpirationIntent.init(rawValue:)) }
        set { rawExpirationIntent = newValue?.rawValue }
    }
    public var originalTransactionId: String?
    public var autoRenewProductId: String?
    public var productId: String?
    public var rawAutoRenewStatus: Int32?
    /// [autoRenewStatus](https://developer.apple.com/documentation/appstoreserverapi/autorenewstatus)
    public var autoRenewStatus: AutoRenewStatus? {
        get { rawAutoRenewStatus.flatMap(AutoRenewStatus.init(rawValue:)) }
        set { rawAutoRenewStatus = newValue?.rawValue }
    }
    public var isInBillingRetryPeriod: Bool?
    public var rawPriceIncreaseStatus: Int32?
    /// [priceIncreaseStatus](https://developer.apple.com/documentation/appstoreserverapi/priceincreasestatus)
    public var priceIncreaseStatus: PriceIncreaseStatus? {
        get { rawPriceIncreaseStatus.flatMap(PriceIncreaseStatus.init(rawValue:)) }
        set { rawPriceIncreaseStatus = newValue?.rawValue }
    }
    public var gracePeriodExpiresDate: Date?
    public var rawOfferType: Int32?
    /// [offerType](https://developer.apple.com/documentation/appstoreserverapi/offertype)
    public var offerType: OfferType? {
        get { rawOfferType.flatMap(OfferType.init(rawValue:)) }
        set { rawOfferType = newValue?.rawValue }
    }
    public var offerIdentifier: String?
    public var offerPeriod: String?
    public var rawOfferDiscountType: String?
    /// [offerDiscountType](https://developer.apple.com/documentation/appstoreserverapi/offerdiscounttype)
    public var offerDiscountType: OfferDiscountType? {
        get { rawOfferDiscountType.flatMap(OfferDiscountType.init(rawValue:)) }
        set { rawOfferDiscountType = newValue?.rawValue }
    }
    public var signedDate: Date?
    public var rawEnvironment: String?
    /// [environment](https://developer.apple.com/documentation/appstoreserverapi/environment)
    public var environment: AppStoreEnvironment? {
        get { rawEnvironment.flatMap(AppStoreEnvironment.init(rawValue:)) }
        set { rawEnvironment = newValue?.rawValue }
    }
    public var recentSubscriptionStartDate: Date?
    public var renewalDate: Date?
    /// ISO 4217 currency code of `renewalPrice`.
    public var currency: String?
    /// Renewal price in milliunits of `currency`.
    public var renewalPrice: Int64?
    public var eligibleWinBackOfferIds: [String]?
    public var rawAppAccountToken: String?
    /// [appAccountToken](https://developer.apple.com/documentation/appstoreserverapi/appaccounttoken)
    public var appAccountToken: UUID? {
        get { rawAppAccountToken.flatMap(UUID.init(uuidString:)) }
        set { rawAppAccountToken = newValue?.uuidString.lowercased() }
    }
    public var appTransactionId: String?
    public var rawRenewalBillingPlanType: String?
    /// [renewalBillingPlanType](https://developer.apple.com/documentation/appstoreserverapi/renewalbillingplantype)
    public var renewalBillingPlanType: BillingPlanType? {
        get { rawRenewalBillingPlanType.flatMap(BillingPlanType.init(rawValue:)) }
        set { rawRenewalBillingPlanType = newValue?.rawValue }
    }
    /// Set while the subscription is in a commitment.
    public var commitmentInfo: RenewalCommitmentInfo?

    public init() {}

    enum CodingKeys: String, CodingKey {
        case rawExpirationIntent = "expirationIntent"
        case originalTransactionId, autoRenewProductId, productId
        case rawAutoRenewStatus = "autoRenewStatus"
        case isInBillingRetryPeriod
        case rawPriceIncreaseStatus = "priceIncreaseStatus"
        case gracePeriodExpiresDate
        case rawOfferType = "offerType"
        case offerIdentifier, offerPeriod
        case rawOfferDiscountType = "offerDiscountType"
        case signedDate
        case rawEnvironment = "environment"
        case recentSubscriptionStartDate, renewalDate, currency, renewalPrice, eligibleWinBackOfferIds
        case rawAppAccountToken = "appAccountToken"
        case appTransactionId
        case rawRenewalBillingPlanType = "renewalBillingPlanType"
        case commitmentInfo
    }
}
