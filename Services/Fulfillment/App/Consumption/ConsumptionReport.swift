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

    public init(
        granted: MicroCredits?, poolBalance: MicroCredits, hadFreeTrial: Bool, delivered: Bool, accountCreated: Date?,
        appAccountToken: UUID?
    ) {
        self.granted = granted
        self.poolBalance = poolBalance
        self.hadFreeTrial = hadFreeTrial
        self.delivered = delivered
        self.accountCreated = accountCreated
        self.appAccountToken = appAccountToken
    }
}

/// The answer to a CONSUMPTION_REQUEST, built only for a user who consented to share it.
///
/// Only what the service knows is declared; the rest is Apple's "undeclared" (0): the platform
/// and play time (no telemetry here), lifetime dollars (prices come in many currencies), the
/// account status (not tracked here) and a refund preference (a business policy nobody set).
public enum ConsumptionReport {
    public static func request(_ facts: ConsumptionFacts, now: Date) -> ConsumptionRequest {
        var request = ConsumptionRequest()
        request.customerConsented = true
        request.consumptionStatus = consumptionStatus(facts)
        request.platform = 0
        request.sampleContentProvided = facts.hadFreeTrial
        // 0: delivered and working; 5: not delivered for another reason.
        request.deliveryStatus = facts.delivered ? 0 : 5
        request.appAccountToken = facts.appAccountToken
        request.accountTenure = facts.accountCreated.map { accountTenure(days: now.timeIntervalSince($0) / 86_400) } ?? 0
        request.playTime = 0
        request.lifetimeDollarsRefunded = 0
        request.lifetimeDollarsPurchased = 0
        request.userStatus = 0
        request.refundPreference = 0
        return request
    }

    /// 1 not consumed, 2 partially, 3 fully, 0 when nothing was granted. The credits still in the
    /// pool are counted as this grant's first: the estimate never overstates consumption.
    static func consumptionStatus(_ facts: ConsumptionFacts) -> Int32 {
        guard let granted = facts.granted, granted > 0 else { return 0 }
        let remaining = min(granted, max(0, facts.poolBalance))
        if remaining == granted { return 1 }
        return remaining == 0 ? 3 : 2
    }

    /// Apple's ranges: 1 up to 3 days, 2 up to 10, 3 up to 30, 4 up to 90, 5 up to 180, 6 up to 365, 7 beyond.
    static func accountTenure(days: Double) -> Int32 {
        let bounds: [Double] = [3, 10, 30, 90, 180, 365]
        return Int32((bounds.firstIndex { days < $0 } ?? bounds.count) + 1)
    }
}
