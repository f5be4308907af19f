/// How Apple bills a subscription's period: all at once, or monthly over a 12-month commitment.
///
/// [billingPlanType](https://developer.apple.com/documentation/appstoreserverapi/billingplantype);
/// the renewal info's `renewalBillingPlanType` and `commitmentRenewalBillingPlanType` take the same values.
public enum BillingPlanType: String, Codable, Hashable, Sendable, CaseIterable {
    case billedUpfront = "BILLED_UPFRONT"
    case monthly = "MONTHLY"
}
