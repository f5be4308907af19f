/// A customer's signed app transaction for this app.
///
/// [AppTransactionInfoResponse](https://developer.apple.com/documentation/appstoreserverapi/apptransactioninforesponse)
public struct AppTransactionInfoResponse: Codable, Hashable, Sendable {
    /// A JWS of `AppTransaction`.
    public var signedAppTransactionInfo: String?

    public init(signedAppTransactionInfo: String? = nil) { self.signedAppTransactionInfo = signedAppTransactionInfo }
}
