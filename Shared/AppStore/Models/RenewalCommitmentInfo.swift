import Foundation

/// What happens when a commitment ends: whether it renews, into which product and billing plan.
///
/// [RenewalCommitmentInfo](https://developer.apple.com/documentation/appstoreserverapi/renewalcommitmentinfo)
public struct RenewalCommitmentInfo: Codable, Hashable, Sendable {
    public var commitmentAutoRenewProductId: String?
    public var rawCommitmentAutoRenewStatus: Int32?
    /// [commitmentAutoRenewStatus](https://developer.apple.com/documentation/appstoreserverapi/commitmentautorenewstatus)
    public var commitmentAutoRenewStatus: AutoRenewStatus? {
        get { rawCommitmentAutoRenewStatus.flatMap(AutoRenewStatus.init(rawValue:)) }
        set { rawCommitmentAutoRenewStatus = newValue?.rawValue }
    }
    public var rawCommitmentRenewalBillingPlanType: String?
    /// [commitmentRenewalBillingPlanType](https://developer.apple.com/documentation/appstoreserverapi/commitmentrenewalbillingplantype)
    public var commitmentRenewalBillingPlanType: BillingPlanType? {
        get { rawCommitmentRenewalBillingPlanType.flatMap(BillingPlanType.init(rawValue:)) }
        set { rawCommitmentRenewalBillingPlanType = newValue?.rawValue }
    }
    public var commitmentRenewalDate: Date?
    /// In milliunits of the renewal info's `currency`.
    public var commitmentRenewalPrice: Int64?

    public init() {}

    enum CodingKeys: String, CodingKey {
        case commitmentAutoRenewProductId
        case rawCommitmentAutoRenewStatus = "commitmentAutoRenewStatus"
        case rawCommitmentRenewalBillingPlanType = "commitmentRenewalBillingPlanType"
        case commitmentRenewalDate, commitmentRenewalPrice
    }
}
