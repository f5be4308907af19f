/// The app metadata and the signed transaction and renewal information of a notification
/// (Apple's `data` object, renamed so it does not shadow Foundation's `Data`).
///
/// [data](https://developer.apple.com/documentation/appstoreservernotifications/data)
public struct NotificationData: Codable, Hashable, Sendable {
    public var rawEnvironment: String?
    /// [environment](https://developer.apple.com/documentation/appstoreservernotifications/environment)
    public var environment: AppStoreEnvironment? {
        get { rawEnvironment.flatMap(AppStoreEnvironment.init(rawValue:)) }
        set { rawEnvironment = newValue?.rawValue }
    }
    /// [appAppleId](https://developer.apple.com/documentation/appstoreservernotifications/appappleid)
    public var appAppleId: Int64?
    /// [bundleId](https://developer.apple.com/documentation/appstoreservernotifications/bundleid)
    public var bundleId: String?
    /// [bundleVersion](https://developer.apple.com/documentation/appstoreservernotifications/bundleversion)
    public var bundleVersion: String?
    /// A JWS of `JWSTransactionDecodedPayload`, verified separately on request.
    public var signedTransactionInfo: String?
    /// A JWS of `JWSRenewalInfoDecodedPayload`, verified separately on request.
    public var signedRenewalInfo: String?
    public var rawStatus: Int32?
    /// [status](https://developer.apple.com/documentation/appstoreservernotifications/status)
    public var status: Status? {
        get { rawStatus.flatMap(Status.init(rawValue:)) }
        set { rawStatus = newValue?.rawValue }
    }
    public var rawConsumptionRequestReason: String?
    /// [consumptionRequestReason](https://developer.apple.com/documentation/appstoreservernotifications/consumptionrequestreason)
    public var consumptionRequestReason: ConsumptionRequestReason? {
        get { rawConsumptionRequestReason.flatMap(ConsumptionRequestReason.init(rawValue:)) }
        set { rawConsumptionRequestReason = newValue?.rawValue }
    }

    public init() {}

    enum CodingKeys: String, CodingKey {
        case rawEnvironment = "environment"
        case appAppleId, bundleId, bundleVersion, signedTransactionInfo, signedRenewalInfo
        case rawStatus = "status"
        case rawConsumptionRequestReason = "consumptionRequestReason"
    }
}
