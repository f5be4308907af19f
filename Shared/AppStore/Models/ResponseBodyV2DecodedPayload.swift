import Foundation

/// The decoded payload of a version 2 App Store server notification.
///
/// Exactly one of `data`, `summary`, `externalPurchaseToken` and `appData` is normally present.
///
/// [responseBodyV2DecodedPayload](https://developer.apple.com/documentation/appstoreservernotifications/responsebodyv2decodedpayload)
public struct ResponseBodyV2DecodedPayload: Codable, Hashable, Sendable {
    public var rawNotificationType: String?
    /// [notificationType](https://developer.apple.com/documentation/appstoreservernotifications/notificationtype)
    public var notificationType: NotificationTypeV2? {
        get { rawNotificationType.flatMap(NotificationTypeV2.init(rawValue:)) }
        set { rawNotificationType = newValue?.rawValue }
    }
    public var rawSubtype: String?
    /// [subtype](https://developer.apple.com/documentation/appstoreservernotifications/subtype)
    public var subtype: Subtype? {
        get { rawSubtype.flatMap(Subtype.init(rawValue:)) }
        set { rawSubtype = newValue?.rawValue }
    }
    /// [notificationUUID](https://developer.apple.com/documentation/appstoreservernotifications/notificationuuid)
    public var notificationUUID: String?
    /// [version](https://developer.apple.com/documentation/appstoreservernotifications/version)
    public var version: String?
    /// When the App Store signed the notification; absent in some early (2022) notifications.
    public var signedDate: Date?
    public var data: NotificationData?
    public var summary: Summary?
    public var externalPurchaseToken: ExternalPurchaseToken?
    public var appData: AppData?

    public init() {}

    enum CodingKeys: String, CodingKey {
        case rawNotificationType = "notificationType"
        case rawSubtype = "subtype"
        case notificationUUID, version, signedDate
        case data, summary, externalPurchaseToken, appData
    }
}
