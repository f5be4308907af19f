import Foundation

/// The body Apple posts to the Get Retention Message endpoint: one signed payload.
///
/// [RealtimeRequestBody](https://developer.apple.com/documentation/retentionmessaging/realtimerequestbody)
public struct RealtimeRequestBody: Codable, Hashable, Sendable {
    /// The JWS of a `DecodedRealtimeRequestBody`, signed by the App Store.
    public var signedPayload: String?

    public init(signedPayload: String? = nil) { self.signedPayload = signedPayload }
}

/// What the App Store asks when a subscriber views a subscription they may cancel (Retention
/// Messaging API), decoded from `RealtimeRequestBody.signedPayload`.
///
/// [DecodedRealtimeRequestBody](https://developer.apple.com/documentation/retentionmessaging/decodedrealtimerequestbody)
public struct DecodedRealtimeRequestBody: Codable, Hashable, Sendable {
    public var originalTransactionId: String?
    public var appAppleId: Int64?
    public var productId: String?
    public var userLocale: String?
    /// A UUID the App Store creates for each request.
    public var requestIdentifier: String?
    public var signedDate: Date?
    public var rawEnvironment: String?
    public var environment: AppStoreEnvironment? {
        get { rawEnvironment.flatMap(AppStoreEnvironment.init(rawValue:)) }
        set { rawEnvironment = newValue?.rawValue }
    }

    public init() {}

    enum CodingKeys: String, CodingKey {
        case rawEnvironment = "environment"
        case originalTransactionId, appAppleId, productId, userLocale, requestIdentifier, signedDate
    }
}
