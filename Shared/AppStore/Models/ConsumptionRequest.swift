import Foundation

/// Consumption information about a refund-requested purchase (answer to CONSUMPTION_REQUEST).
/// Integer fields keep Apple's raw codes, so a new Apple value can be sent without a release.
///
/// [ConsumptionRequest](https://developer.apple.com/documentation/appstoreserverapi/consumptionrequest)
public struct ConsumptionRequest: Codable, Hashable, Sendable {
    public var customerConsented: Bool?
    /// 0 undeclared, 1 not consumed, 2 partially, 3 fully.
    public var consumptionStatus: Int32?
    /// 0 undeclared, 1 Apple, 2 non-Apple.
    public var platform: Int32?
    public var sampleContentProvided: Bool?
    /// 0 delivered and working, 1–5 the delivery problem.
    public var deliveryStatus: Int32?
    public var appAccountToken: UUID?
    /// 0 undeclared, 1–7 day ranges.
    public var accountTenure: Int32?
    /// 0 undeclared, 1–7 time ranges.
    public var playTime: Int32?
    /// 0 undeclared, 1–7 dollar ranges.
    public var lifetimeDollarsRefunded: Int32?
    /// 0 undeclared, 1–7 dollar ranges.
    public var lifetimeDollarsPurchased: Int32?
    /// 0 undeclared, 1 active, 2 suspended, 3 terminated, 4 limited.
    public var userStatus: Int32?
    /// 0 undeclared, 1 grant, 2 decline, 3 no preference.
    public var refundPreference: Int32?

    public init() {}
}
