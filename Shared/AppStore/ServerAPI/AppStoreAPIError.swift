/// An error code of the App Store Server API (`errorCode` of an error response). An open set:
/// an unknown number is kept as it is, so a new Apple code never breaks error handling.
///
/// [Error codes](https://developer.apple.com/documentation/appstoreserverapi/error_codes)
public struct AppStoreAPIErrorCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: Int64
    public init(rawValue: Int64) { self.rawValue = rawValue }

    public static let generalBadRequest = Self(rawValue: 4_000_000)
    public static let invalidAppIdentifier = Self(rawValue: 4_000_002)
    public static let invalidRequestRevision = Self(rawValue: 4_000_005)
    public static let invalidTransactionId = Self(rawValue: 4_000_006)
    public static let invalidOriginalTransactionId = Self(rawValue: 4_000_008)
    public static let invalidExtendByDays = Self(rawValue: 4_000_009)
    public static let invalidExtendReasonCode = Self(rawValue: 4_000_010)
    public static let invalidRequestIdentifier = Self(rawValue: 4_000_011)
    public static let startDateTooFarInPast = Self(rawValue: 4_000_012)
    public static let startDateAfterEndDate = Self(rawValue: 4_000_013)
    public static let invalidPaginationToken = Self(rawValue: 4_000_014)
    public static let invalidStartDate = Self(rawValue: 4_000_015)
    public static let invalidEndDate = Self(rawValue: 4_000_016)
    public static let paginationTokenExpired = Self(rawValue: 4_000_017)
    public static let invalidNotificationType = Self(rawValue: 4_000_018)
    public static let multipleFiltersSupplied = Self(rawValue: 4_000_019)
    public static let invalidTestNotificationToken = Self(rawValue: 4_000_020)
    public static let invalidSort = Self(rawValue: 4_000_021)
    public static let invalidProductType = Self(rawValue: 4_000_022)
    public static let invalidProductId = Self(rawValue: 4_000_023)
    public static let invalidSubscriptionGroupIdentifier = Self(rawValue: 4_000_024)
    public static let invalidInAppOwnershipType = Self(rawValue: 4_000_026)
    public static let invalidRevoked = Self(rawValue: 4_000_030)
    public static let invalidStatus = Self(rawValue: 4_000_031)
    public static let invalidAppAccountToken = Self(rawValue: 4_000_033)
    /// Set App Account Token and Send Consumption Information refuse a family-shared transaction.
    public static let familyTransactionNotSupported = Self(rawValue: 4_000_185)
    public static let transactionIdIsNotOriginalTransactionId = Self(rawValue: 4_000_187)
    /// Retention Messaging: a refused upload (not a PNG, text or alt text too long, a locale Apple
    /// does not know, bullet points beyond five or too long, a header above a missing image).
    public static let invalidImage = Self(rawValue: 4_000_161)
    public static let headerTooLong = Self(rawValue: 4_000_162)
    public static let bodyTooLong = Self(rawValue: 4_000_163)
    public static let invalidLocale = Self(rawValue: 4_000_164)
    public static let altTextTooLong = Self(rawValue: 4_000_175)
    public static let badRequestImageSize = Self(rawValue: 4_000_216)
    public static let tooManyBulletPoints = Self(rawValue: 4_000_218)
    public static let bulletPointTextTooLong = Self(rawValue: 4_000_219)
    public static let aboveImageRequiresAnImage = Self(rawValue: 4_000_224)
    public static let subscriptionExtensionIneligible = Self(rawValue: 4_030_004)
    public static let subscriptionMaxExtension = Self(rawValue: 4_030_005)
    public static let familySharedSubscriptionExtensionIneligible = Self(rawValue: 4_030_007)
    /// Retention Messaging: the app's 2,000 images or its messages are used up; a default must be
    /// an approved message (and image); an image a message uses cannot be deleted.
    public static let maximumNumberOfImagesReached = Self(rawValue: 4_030_014)
    public static let maximumNumberOfMessagesReached = Self(rawValue: 4_030_016)
    public static let messageNotApproved = Self(rawValue: 4_030_017)
    public static let imageNotApproved = Self(rawValue: 4_030_018)
    public static let imageInUse = Self(rawValue: 4_030_019)
    public static let accountNotFound = Self(rawValue: 4_040_001)
    public static let accountNotFoundRetryable = Self(rawValue: 4_040_002)
    public static let appNotFound = Self(rawValue: 4_040_003)
    public static let appNotFoundRetryable = Self(rawValue: 4_040_004)
    public static let originalTransactionIdNotFound = Self(rawValue: 4_040_005)
    public static let originalTransactionIdNotFoundRetryable = Self(rawValue: 4_040_006)
    public static let serverNotificationURLNotFound = Self(rawValue: 4_040_007)
    public static let testNotificationNotFound = Self(rawValue: 4_040_008)
    public static let statusRequestNotFound = Self(rawValue: 4_040_009)
    public static let transactionIdNotFound = Self(rawValue: 4_040_010)
    /// Get App Transaction Info: the customer has no app transaction for this app.
    public static let appTransactionDoesNotExist = Self(rawValue: 4_040_019)
    /// Retention Messaging: no such image, message or default message; an identifier in use.
    public static let imageNotFound = Self(rawValue: 4_040_014)
    public static let messageNotFound = Self(rawValue: 4_040_015)
    public static let defaultMessageNotFound = Self(rawValue: 4_040_020)
    public static let imageAlreadyExists = Self(rawValue: 4_090_000)
    public static let messageAlreadyExists = Self(rawValue: 4_090_001)
    public static let rateLimitExceeded = Self(rawValue: 4_290_000)
    public static let generalInternal = Self(rawValue: 5_000_000)
    public static let generalInternalRetryable = Self(rawValue: 5_000_001)

    /// The codes Apple documents as worth retrying; every other code is final.
    public static let retryable: Set<AppStoreAPIErrorCode> = [
        .accountNotFoundRetryable, .appNotFoundRetryable, .originalTransactionIdNotFoundRetryable,
        .generalInternalRetryable, .rateLimitExceeded,
    ]

    public var isRetryable: Bool { Self.retryable.contains(self) }

    public var description: String { String(rawValue) }
}

/// Why a call to the App Store Server API failed, after any retries.
public struct AppStoreAPIError: Error, Sendable, CustomStringConvertible {
    /// The broad cause, which decides what a caller can do about it.
    public enum Kind: String, Sendable, Hashable {
        /// Apple answered with an error status (see `statusCode`, `rawAPIError`).
        case api
        /// No HTTP answer: connection refused or reset, DNS, TLS.
        case transport
        /// A connect, read or total timeout expired.
        case timeout
        /// A 2xx answer whose body is not the expected JSON.
        case invalidResponse
        /// The request could not be built (an identifier that is not a path segment, bad JSON).
        case invalidRequest
    }

    public let kind: Kind
    /// The HTTP status of the last answer, when there was one.
    public let statusCode: Int?
    /// Apple's `errorCode` as sent (also when unknown to this client).
    public let rawAPIError: Int64?
    /// Apple's `errorMessage` or a description of the failure.
    public let message: String
    /// How many HTTP requests were made (retries and the 401 re-sign included).
    public let attempts: Int

    public init(kind: Kind, statusCode: Int? = nil, rawAPIError: Int64? = nil, message: String, attempts: Int) {
        self.kind = kind
        self.statusCode = statusCode
        self.rawAPIError = rawAPIError
        self.message = message
        self.attempts = attempts
    }

    /// Apple's error code, typed (known or not).
    public var apiError: AppStoreAPIErrorCode? { rawAPIError.map(AppStoreAPIErrorCode.init(rawValue:)) }

    /// Whether a later call may succeed: transport trouble, timeouts, 429, 5xx and Apple's
    /// retryable codes.
    public var isRetryable: Bool {
        switch kind {
        case .transport, .timeout: true
        case .invalidResponse, .invalidRequest: false
        case .api: apiError.map(\.isRetryable) ?? (statusCode == 429 || (statusCode ?? 0) >= 500)
        }
    }

    public var description: String {
        var parts = ["App Store Server API \(kind.rawValue) error"]
        if let statusCode { parts.append("HTTP \(statusCode)") }
        if let rawAPIError { parts.append("errorCode \(rawAPIError)") }
        parts.append("after \(attempts) request(s): \(message)")
        return parts.joined(separator: ", ")
    }
}
