/// A test notification and Apple's attempts to deliver it.
///
/// [CheckTestNotificationResponse](https://developer.apple.com/documentation/appstoreserverapi/checktestnotificationresponse)
public struct CheckTestNotificationResponse: Codable, Hashable, Sendable {
    public var signedPayload: String?
    public var sendAttempts: [SendAttemptItem]?

    public init(signedPayload: String? = nil, sendAttempts: [SendAttemptItem]? = nil) {
        self.signedPayload = signedPayload
        self.sendAttempts = sendAttempts
    }
}
