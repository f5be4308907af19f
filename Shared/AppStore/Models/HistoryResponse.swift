/// One page of a customer's transaction history; ask again with `revision` while `hasMore`.
///
/// [HistoryResponse](https://developer.apple.com/documentation/appstoreserverapi/historyresponse)
public struct HistoryResponse: Codable, Hashable, Sendable {
    /// The token for the next page.
    public var revision: String?
    public var hasMore: Bool?
    public var bundleId: String?
    public var appAppleId: Int64?
    public var rawEnvironment: String?
    public var environment: AppStoreEnvironment? {
        get { rawEnvironment.flatMap(AppStoreEnvironment.init(rawValue:)) }
        set { rawEnvironment = newValue?.rawValue }
    }
    /// JWS of `JWSTransactionDecodedPayload`.
    public var signedTransactions: [String]?

    public init(
        revision: String? = nil, hasMore: Bool? = nil, bundleId: String? = nil, appAppleId: Int64? = nil,
        environment: AppStoreEnvironment? = nil, signedTransactions: [String]? = nil
    ) {
        self.revision = revision
        self.hasMore = hasMore
        self.bundleId = bundleId
        self.appAppleId = appAppleId
        self.rawEnvironment = environment?.rawValue
        self.signedTransactions = signedTransactions
    }

    enum CodingKeys: String, CodingKey {
        case revision, hasMore, bundleId, appAppleId
        case rawEnvironment = "environment"
        case signedTransactions
    }
}
