import Foundation

/// Extends the renewal date of every eligible active subscriber of one product (optionally only
/// in some storefronts).
///
/// [MassExtendRenewalDateRequest](https://developer.apple.com/documentation/appstoreserverapi/massextendrenewaldaterequest)
public struct MassExtendRenewalDateRequest: Codable, Hashable, Sendable {
    /// 1...90 days.
    public var extendByDays: Int32
    /// 0 undeclared, 1 customer satisfaction, 2 other, 3 service issue or outage.
    public var extendReasonCode: Int32
    /// A UUID string naming the request; the status endpoint and the RENEWAL_EXTENSION / SUMMARY
    /// notification carry it back.
    public var requestIdentifier: String
    /// ISO 3166-1 alpha-3 codes; absent, every storefront.
    public var storefrontCountryCodes: [String]?
    public var productId: String

    public init(
        extendByDays: Int32, extendReasonCode: Int32, requestIdentifier: String, storefrontCountryCodes: [String]? = nil,
        productId: String
    ) {
        self.extendByDays = extendByDays
        self.extendReasonCode = extendReasonCode
        self.requestIdentifier = requestIdentifier
        self.storefrontCountryCodes = storefrontCountryCodes
        self.productId = productId
    }
}

/// Apple's receipt of a mass extension request (it runs asynchronously, for hours or days).
///
/// [MassExtendRenewalDateResponse](https://developer.apple.com/documentation/appstoreserverapi/massextendrenewaldateresponse)
public struct MassExtendRenewalDateResponse: Codable, Hashable, Sendable {
    public var requestIdentifier: String?

    public init(requestIdentifier: String? = nil) { self.requestIdentifier = requestIdentifier }
}

/// Where a mass extension request stands; `complete` true once Apple has processed every subscriber.
///
/// [MassExtendRenewalDateStatusResponse](https://developer.apple.com/documentation/appstoreserverapi/massextendrenewaldatestatusresponse)
public struct MassExtendRenewalDateStatusResponse: Codable, Hashable, Sendable {
    public var requestIdentifier: String?
    public var complete: Bool?
    public var completeDate: Date?
    public var succeededCount: Int64?
    public var failedCount: Int64?

    public init(
        requestIdentifier: String? = nil, complete: Bool? = nil, completeDate: Date? = nil, succeededCount: Int64? = nil,
        failedCount: Int64? = nil
    ) {
        self.requestIdentifier = requestIdentifier
        self.complete = complete
        self.completeDate = completeDate
        self.succeededCount = succeededCount
        self.failedCount = failedCount
    }
}
