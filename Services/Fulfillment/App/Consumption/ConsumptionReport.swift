import AppStore
import Domain
import Foundation

/// What this service knows about a refund-requested purchase, as far as consumption goes.
public struct ConsumptionFacts: Sendable, Equatable {
    /// Credits granted for the transaction (nil: none were).
    public var granted: MicroCredits?
    /// What usage burned of those credits (the transaction's lots).
    public var used: MicroCredits
    /// The chain started with a free trial (Apple: a free sample was provided).
    public var hadFreeTrial: Bool
    /// Something was delivered for the transaction: a grant, or its order is FULFILLED.
    public var delivered: Bool
    public var accountCreated: Date?
    public var appAccountToken: UUID?
    /// The catalogue's refund preference for the product (nil: none).
    public var refundPreference: RefundPreference?

    public init(
        granted: MicroCredits?, used: MicroCredits, hadFreeTrial: Bool, delivered: Bool, accountCreated: Date?,
        appAccountToken: UUID?, refundPreference: RefundPreference? = nil
    ) {
        self.granted = granted
        self.used = used
        self.hadFreeTrial = hadFreeTrial
        self.delivered = delivered
        self.accountCreated = accountCreated
        self.appAccountToken = appAccountToken
        self.refundPreference = refundPreference
    }
}

/// The answer to a CONSUMPTION_REQUEST, built only for a user who consented to share it.
///
/// `consumptionPercentage` is how much of the credits the transaction granted its lots have
/// used up (milliunits, rounded down; none when it granted nothing). Apple reads it for
/// consumables (credit packs) and ignores it for auto-renewable subscriptions. The refund
/// preference is the catalogue's.
public enum ConsumptionReport {
    public static func request(_ facts: ConsumptionFacts) -> ConsumptionRequest {
        ConsumptionRequest(
            customerConsented: true, consumptionPercentage: consumptionPercentage(used: facts.used, granted: facts.granted),
            deliveryStatus: facts.delivered ? "DELIVERED" : "UNDELIVERED_OTHER", refundPreference: facts.refundPreference?.rawValue,
            sampleContentProvided: facts.hadFreeTrial)
    }

    /// `used` of `granted` in Apple's milliunits (0...100000), rounded down; nil without a grant.
    public static func consumptionPercentage(used: MicroCredits, granted: MicroCredits?) -> Int32? {
        guard let granted, granted > 0 else { return nil }
        // `share` is within 0...1 (used clamped to the grant, the grant positive), so the milliunits fit.
        let share = Double(min(max(used, 0), granted)) / Double(granted)
        return Int32((share * 100_000).rounded(.down))
    }
}
