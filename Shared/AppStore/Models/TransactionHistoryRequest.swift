import Foundation

/// The filters of Get Transaction History (sent as query parameters).
///
/// [Get Transaction History](https://developer.apple.com/documentation/appstoreserverapi/get-transaction-history)
public struct TransactionHistoryRequest: Hashable, Sendable {
    /// The order of the transactions by modification date.
    public enum Order: String, Hashable, Sendable {
        case ascending = "ASCENDING"
        case descending = "DESCENDING"
    }

    public var startDate: Date?
    public var endDate: Date?
    public var productIds: [String]
    public var productTypes: [ProductType]
    public var sort: Order?
    public var subscriptionGroupIdentifiers: [String]
    public var inAppOwnershipType: InAppOwnershipType?
    public var revoked: Bool?

    public init(
        startDate: Date? = nil, endDate: Date? = nil, productIds: [String] = [], productTypes: [ProductType] = [],
        sort: Order? = nil, subscriptionGroupIdentifiers: [String] = [], inAppOwnershipType: InAppOwnershipType? = nil,
        revoked: Bool? = nil
    ) {
        self.startDate = startDate
        self.endDate = endDate
        self.productIds = productIds
        self.productTypes = productTypes
        self.sort = sort
        self.subscriptionGroupIdentifiers = subscriptionGroupIdentifiers
        self.inAppOwnershipType = inAppOwnershipType
        self.revoked = revoked
    }

    /// Query items in Apple's names; dates as epoch milliseconds, product types in the
    /// query spelling (AUTO_RENEWABLE, NON_RENEWABLE, CONSUMABLE, NON_CONSUMABLE).
    var queryItems: [URLQueryItem] {
        var items: [URLQueryItem] = []
        if let startDate { items.append(URLQueryItem(name: "startDate", value: AppStoreJSON.milliseconds(startDate))) }
        if let endDate { items.append(URLQueryItem(name: "endDate", value: AppStoreJSON.milliseconds(endDate))) }
        items += productIds.map { URLQueryItem(name: "productId", value: $0) }
        items += productTypes.map { URLQueryItem(name: "productType", value: $0.queryValue) }
        if let sort { items.append(URLQueryItem(name: "sort", value: sort.rawValue)) }
        items += subscriptionGroupIdentifiers.map { URLQueryItem(name: "subscriptionGroupIdentifier", value: $0) }
        if let inAppOwnershipType { items.append(URLQueryItem(name: "inAppOwnershipType", value: inAppOwnershipType.rawValue)) }
        if let revoked { items.append(URLQueryItem(name: "revoked", value: revoked ? "true" : "false")) }
        return items
    }
}

extension ProductType {
    /// The spelling the history endpoint's `productType` parameter wants.
    var queryValue: String {
        switch self {
        case .autoRenewableSubscription: "AUTO_RENEWABLE"
        case .nonRenewingSubscription: "NON_RENEWABLE"
        case .consumable: "CONSUMABLE"
        case .nonConsumable: "NON_CONSUMABLE"
        }
    }
}
