/// One signed transaction.
///
/// [TransactionInfoResponse](https://developer.apple.com/documentation/appstoreserverapi/transactioninforesponse)
public struct TransactionInfoResponse: Codable, Hashable, Sendable {
    /// A JWS of `JWSTransactionDecodedPayload`.
    public var signedTransactionInfo: String?

    public init(signedTransactionInfo: String? = nil) { self.signedTransactionInfo = signedTransactionInfo }
}
