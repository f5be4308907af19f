/// Why the App Store refunded or revoked a transaction.
///
/// [revocationReason](https://developer.apple.com/documentation/appstoreserverapi/revocationreason)
public enum RevocationReason: Int32, Codable, Hashable, Sendable, CaseIterable {
    case refundedForOtherReason = 0
    case refundedDueToIssue = 1
}
