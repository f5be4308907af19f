import Foundation

/// Extends one customer's subscription renewal date.
///
/// [ExtendRenewalDateRequest](https://developer.apple.com/documentation/appstoreserverapi/extendrenewaldaterequest)
public struct ExtendRenewalDateRequest: Codable, Hashable, Sendable {
    /// 1...90 days.
    public var extendByDays: Int32?
    /// 0 undeclared, 1 customer satisfaction, 2 other, 3 service issue or outage.
    public var extendReasonCode: Int32?
    /// A unique id (UUID string) that makes a retried request idempotent.
    public var requestIdentifier: String?

    public init(extendByDays: Int32? = nil, extendReasonCode: Int32? = nil, requestIdentifier: String? = nil) {
        self.extendByDays = extendByDays
        self.extendReasonCode = extendReasonCode
        self.requestIdentifier = requestIdentifier
    }
}

/// The result of a renewal date extension.
///
/// [ExtendRenewalDateResponse](https://developer.apple.com/documentation/appstoreserverapi/extendrenewaldateresponse)
public struct ExtendRenewalDateResponse: Codable, Hashable, Sendable {
    public var originalTransactionId: String?
    public var webOrderLineItemId: String?
    public var success: Bool?
    public var effectiveDate: Date?

    public init(originalTransactionId: String? = nil, webOrderLineItemId: String? = nil, success: Bool? = nil, effectiveDate: Date? = nil) {
        self.originalTransactionId = originalTransactionId
        self.webOrderLineItemId = webOrderLineItemId
        self.success = success
        self.effectiveDate = effectiveDate
    }
}
