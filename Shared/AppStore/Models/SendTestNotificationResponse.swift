/// The token of a requested test notification, for Get Test Notification Status.
///
/// [SendTestNotificationResponse](https://developer.apple.com/documentation/appstoreserverapi/sendtestnotificationresponse)
public struct SendTestNotificationResponse: Codable, Hashable, Sendable {
    public var testNotificationToken: String?

    public init(testNotificationToken: String? = nil) { self.testNotificationToken = testNotificationToken }
}
