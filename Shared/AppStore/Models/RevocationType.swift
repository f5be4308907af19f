/// How a transaction was revoked: full or prorated refund, or Family Sharing revocation.
///
/// [revocationType](https://developer.apple.com/documentation/appstoreserverapi/revocationtype)
public enum RevocationType: String, Codable, Hashable, Sendable, CaseIterable {
    case refundFull = "REFUND_FULL"
    case refundProrated = "REFUND_PRORATED"
    case familyRevoke = "FAMILY_REVOKE"
}
