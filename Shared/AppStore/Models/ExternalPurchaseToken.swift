import Foundation

/// An external purchase token, sent in EXTERNAL_PURCHASE_TOKEN notifications.
///
/// [externalPurchaseToken](https://developer.apple.com/documentation/appstoreservernotifications/externalpurchasetoken)
public struct ExternalPurchaseToken: Codable, Hashable, Sendable {
    /// Starts with `SANDBOX` for sandbox tokens (Apple's only environment marker here).
    public var externalPurchaseId: String?
    public var tokenCreationDate: Date?
    public var appAppleId: Int64?
    public var bundleId: String?

    public init() {}

    /// The environment implied by the token id, as Apple's libraries derive it.
    public var environment: AppStoreEnvironment {
        (externalPurchaseId?.hasPrefix("SANDBOX") ?? false) ? .sandbox : .production
    }
}
