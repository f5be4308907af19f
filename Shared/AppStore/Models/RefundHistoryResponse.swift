/// One page of a customer's refunded transactions; ask again with `revision` while `hasMore`.
///
/// [RefundHistoryResponse](https://developer.apple.com/documentation/appstoreserverapi/refundhistoryresponse)
public struct RefundHistoryResponse: Codable, Hashable, Sendable {
    /// JWS of `JWSTransactionDecodedPayload`.
    public var signedTransactions: [String]?
    public var revision: String?
    public var hasMore: Bool?

    public init(signedTransactions: [String]? = nil, revision: String? = nil, hasMore: Bool? = nil) {
        self.signedTransactions = signedTransactions
        self.revision = revision
        self.hasMore = hasMore
    }
}
