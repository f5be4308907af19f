/// The HTTP body Apple posts to the notification endpoint: `{"signedPayload": "<JWS>"}`.
///
/// [responseBodyV2](https://developer.apple.com/documentation/appstoreservernotifications/responsebodyv2)
public struct ResponseBodyV2: Codable, Hashable, Sendable {
    public var signedPayload: String?

    public init(signedPayload: String? = nil) { self.signedPayload = signedPayload }
}
