/// App metadata and signed app transaction of notifications about the app rather than a purchase
/// (for example RESCIND_CONSENT).
///
/// [appData](https://developer.apple.com/documentation/appstoreservernotifications/appdata)
public struct AppData: Codable, Hashable, Sendable {
    public var rawEnvironment: String?
    public var environment: AppStoreEnvironment? {
        get { rawEnvironment.flatMap(AppStoreEnvironment.init(rawValue:)) }
        set { rawEnvironment = newValue?.rawValue }
    }
    public var appAppleId: Int64?
    public var bundleId: String?
    /// A JWS of `AppTransaction`, verified separately on request.
    public var signedAppTransactionInfo: String?

    public init() {}

    enum CodingKeys: String, CodingKey {
        case rawEnvironment = "environment"
        case appAppleId, bundleId, signedAppTransactionInfo
    }
}
