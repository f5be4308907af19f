import AppStore
import Domain
import Foundation

/// What this service knows about a refund-requested purchase, as far as consumption goes.
public struct ConsumptionFacts: Sendable, Equatable {
    /// Credits granted for the transaction (nil: none were).
    public var granted: MicroCredits?
    /// The user's subscription pool now.
    public var poolBalance: MicroCredits
    /// The chain started with a free trial (Apple: a free sample was provided).
    public var hadFreeTrial: Bool
    /// Something was delivered for the transaction: a grant, or its order is FULFILLED.
    public var delivered: Bool
    public var accountCreated: Date?
    public var appAccountToken: UUID?
    /// The catalogue's refund preference for the product (nil: none).
    public var refundPreference: RefundPreference?

    public init(
        granted: MicroCredits?, poolBalance: MicroCredits, hadFreeTrial: Bool, delivered: Bool, accountCreated: Date?,
        appAccountToken: UUID?, refundPreference: RefundPreference? = nil
    ) {
        self.granted = granted
        self.poolBalance = poolBalance
        self.hadFreeTrial = hadFreeTrial
        self.delivered = delivered
        self.accountCreated = accountCreated
        self.appAccountToken = appAccountToken
        self.refundPreference = refundPreference
    }
}

/// The answer to a CONSUMPTION_REQUEST, built only for a user who consented to share it.
///
/// The service sells auto-renewable subscriptions only, for which Apple reads no
/// consumptionPercentage (it is for consumables, non-consumables and non-renewing
/// subscriptions), so none is sent; the refund preference is the catalogue's.
public enum ConsumptionReport {
    public static func request(_ facts: ConsumptionFacts) -> ConsumptionRequest {
        ConsumptionRequest(
            customerConsented: true, deliveryStatus: facts.delivered ? "DELIVERED" : "UNDELIVERED_OTHER",
            refundPreference: facts.refundPreference?.rawValue, sampleContentProvided: facts.hadFreeTrial)
    }
}
