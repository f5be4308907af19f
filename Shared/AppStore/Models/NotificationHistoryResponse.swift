import Foundation

/// One page of sent notifications; ask again with `paginationToken` while `hasMore`.
///
/// [NotificationHistoryResponse](https://developer.apple.com/documentation/appstoreserverapi/notificationhistoryresponse)
public struct NotificationHistoryResponse: Codable, Hashable, Sendable {
    public var paginationToken: String?
    public var hasMore: Bool?
    public var notificationHistory: [NotificationHistoryResponseItem]?

    public init(paginationToken: String? = nil, hasMore: Bool? = nil, notificationHistory: [NotificationHistoryResponseItem]? = nil) {
        self.paginationToken = paginationToken
        self.hasMore = hasMore
        self.notificationHistory = notificationHistory
    }
}

/// One sent notification and Apple's attempts to deliver it.
///
/// [NotificationHistoryResponseItem](https://developer.apple.com/documentation/appstoreserverapi/notificationhistoryresponseitem)
public struct NotificationHistoryResponseItem: Codable, Hashable, Sendable {
    /// The notification's JWS, as it was posted.
    public var signedPayload: String?
    public var sendAttempts: [SendAttemptItem]?

    public init(signedPayload: String? = nil, sendAttempts: [SendAttemptItem]? = nil) {
        self.signedPayload = signedPayload
        self.sendAttempts = sendAttempts
    }
}

/// One delivery attempt of a notification.
///
/// [sendAttemptItem](https://developer.apple.com/documentation/appstoreserverapi/sendattemptitem)
public struct SendAttemptItem: Codable, Hashable, Sendable {
    public var attemptDate: Date?
    /// Apple's outcome code, e.g. SUCCESS, TIMED_OUT, NO_RESPONSE, UNSUCCESSFUL_HTTP_RESPONSE_CODE
    /// (kept raw: Apple adds values).
    ///
    /// [sendAttemptResult](https://developer.apple.com/documentation/appstoreserverapi/sendattemptresult)
    public var sendAttemptResult: String?

    public init(attemptDate: Date? = nil, sendAttemptResult: String? = nil) {
        self.attemptDate = attemptDate
        self.sendAttemptResult = sendAttemptResult
    }
}
