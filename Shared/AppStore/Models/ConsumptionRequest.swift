import Foundation

/// Consumption information about a refund-requested In-App Purchase, the answer to a
/// CONSUMPTION_REQUEST through Send Consumption Information (App Store Server API 1.19; V1 is
/// Advanced Commerce's). Names and values as Apple's documentation gives them; the enumerations
/// are kept raw so a new Apple value can be sent without a release.
///
/// [ConsumptionRequest](https://developer.apple.com/documentation/appstoreserverapi/consumptionrequest)
public struct ConsumptionRequest: Codable, Hashable, Sendable {
    /// Apple refuses anything but `true` (InvalidCustomerConsentedError).
    public var customerConsented: Bool
    /// The part of the purchase consumed, in milliunits (0...100000); Apple reads it for
    /// consumables, non-consumables and non-renewing subscriptions.
    public var consumptionPercentage: Int32?
    /// `DELIVERED`, `UNDELIVERED_QUALITY_ISSUE`, `UNDELIVERED_WRONG_ITEM`,
    /// `UNDELIVERED_SERVER_OUTAGE` or `UNDELIVERED_OTHER`.
    public var deliveryStatus: String
    /// `DECLINE`, `GRANT_FULL` or `GRANT_PRORATED`; nil for no preference.
    public var refundPreference: String?
    /// Whether a free sample, trial or description of the content came before the purchase.
    public var sampleContentProvided: Bool

    public init(
        customerConsented: Bool, consumptionPercentage: Int32? = nil, deliveryStatus: String, refundPreference: String? = nil,
        sampleContentProvided: Bool
    ) {
        self.customerConsented = customerConsented
        self.consumptionPercentage = consumptionPercentage
        self.deliveryStatus = deliveryStatus
        self.refundPreference = refundPreference
        self.sampleContentProvided = sampleContentProvided
    }
}
