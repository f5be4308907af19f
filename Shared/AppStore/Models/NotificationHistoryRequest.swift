import Foundation

/// The filters of Get Notification History (the request body); at most one of
/// `notificationType` and `transactionId` may be given.
///
/// [NotificationHistoryRequest](https://developer.apple.com/documentation/appstoreserverapi/notificationhistoryrequest)
public struct NotificationHistoryRequest: Codable, Hashable, Sendable {
    /// Required, at most 180 days ago.
    public var startDate: Date
    /// Required, after `startDate`.
    public var endDate: Date
    public var rawNotificationType: String?
    public var notificationType: NotificationTypeV2? {
        get { rawNotificationType.flatMap(NotificationTypeV2.init(rawValue:)) }
        set { rawNotificationType = newValue?.rawValue }
    }
    public var rawNotificationSubtype: String?
    public var notificationSubtype: Subtype? {
        get { rawNotificationSubtype.flatMap(Subtype.init(rawValue:)) }
        set { rawNotificationSubtype = newValue?.rawValue }
    }
    public var transactionId: String?
    public var onlyFailures: Bool?

    public init(
        startDate: Date, endDate: Date, notificationType: NotificationTypeV2? = nil, notificationSubtype: Subtype? = nil,
        transactionId: String? = nil, onlyFailures: Bool? = nil
    ) {
        self.startDate = startDate
        self.endDate = endDate
        self.rawNotificationType = notificationType?.rawValue
        self.rawNotificationSubtype = notificationSubtype?.rawValue
        self.transactionId = transactionId
        self.onlyFailures = onlyFailures
    }

    enum CodingKeys: String, CodingKey {
        case startDate, endDate
        case rawNotificationType = "notificationType"
        case rawNotificationSubtype = "notificationSubtype"
        case transactionId, onlyFailures
    }
}
