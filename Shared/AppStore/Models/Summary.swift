/// The result of a mass renewal-date extension, sent in RENEWAL_EXTENSION / SUMMARY notifications.
///
/// [summary](https://developer.apple.com/documentation/appstoreservernotifications/summary)
public struct Summary: Codable, Hashable, Sendable {
    public var rawEnvironment: String?
    public var environment: AppStoreEnvironment? {
        get { rawEnvironment.flatMap(AppStoreEnvironment.init(rawValue:)) }
        set { rawEnvironment = newValue?.rawValue }
    }
    public var appAppleId: Int64?
    public var bundleId: String?
    public var productId: String?
    public var requestIdentifier: String?
    public var storefrontCountryCodes: [String]?
    public var succeededCount: Int64?
    public var failedCount: Int64?

    public init() {}

    enum CodingKeys: String, CodingKey {
        case rawEnvironment = "environment"
        case appAppleId, bundleId, productId, requestIdentifier, storefrontCountryCodes
        case succeededCount, failedCount
    }
}
