/// The statuses of every subscription of a customer, grouped by subscription group.
///
/// [StatusResponse](https://developer.apple.com/documentation/appstoreserverapi/statusresponse)
public struct StatusResponse: Codable, Hashable, Sendable {
    public var rawEnvironment: String?
    public var environment: AppStoreEnvironment? {
        get { rawEnvironment.flatMap(AppStoreEnvironment.init(rawValue:)) }
        set { rawEnvironment = newValue?.rawValue }
    }
    public var bundleId: String?
    public var appAppleId: Int64?
    public var data: [SubscriptionGroupIdentifierItem]?

    public init(
        environment: AppStoreEnvironment? = nil, bundleId: String? = nil, appAppleId: Int64? = nil,
        data: [SubscriptionGroupIdentifierItem]? = nil
    ) {
        self.rawEnvironment = environment?.rawValue
        self.bundleId = bundleId
        self.appAppleId = appAppleId
        self.data = data
    }

    enum CodingKeys: String, CodingKey {
        case rawEnvironment = "environment"
        case bundleId, appAppleId, data
    }
}

/// The latest transactions of one subscription group.
///
/// [SubscriptionGroupIdentifierItem](https://developer.apple.com/documentation/appstoreserverapi/subscriptiongroupidentifieritem)
public struct SubscriptionGroupIdentifierItem: Codable, Hashable, Sendable {
    public var subscriptionGroupIdentifier: String?
    public var lastTransactions: [LastTransactionsItem]?

    public init(subscriptionGroupIdentifier: String? = nil, lastTransactions: [LastTransactionsItem]? = nil) {
        self.subscriptionGroupIdentifier = subscriptionGroupIdentifier
        self.lastTransactions = lastTransactions
    }
}

/// The status and the signed latest transaction and renewal info of one subscription.
///
/// [lastTransactionsItem](https://developer.apple.com/documentation/appstoreserverapi/lasttransactionsitem)
public struct LastTransactionsItem: Codable, Hashable, Sendable {
    public var rawStatus: Int32?
    public var status: Status? {
        get { rawStatus.flatMap(Status.init(rawValue:)) }
        set { rawStatus = newValue?.rawValue }
    }
    public var originalTransactionId: String?
    /// A JWS of `JWSTransactionDecodedPayload`.
    public var signedTransactionInfo: String?
    /// A JWS of `JWSRenewalInfoDecodedPayload`.
    public var signedRenewalInfo: String?

    public init(
        status: Status? = nil, originalTransactionId: String? = nil, signedTransactionInfo: String? = nil,
        signedRenewalInfo: String? = nil
    ) {
        self.rawStatus = status?.rawValue
        self.originalTransactionId = originalTransactionId
        self.signedTransactionInfo = signedTransactionInfo
        self.signedRenewalInfo = signedRenewalInfo
    }

    enum CodingKeys: String, CodingKey {
        case rawStatus = "status"
        case originalTransactionId, signedTransactionInfo, signedRenewalInfo
    }
}
