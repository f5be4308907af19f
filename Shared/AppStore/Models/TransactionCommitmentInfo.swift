import Foundation

/// Where a monthly charge stands in its commitment.
///
/// [TransactionCommitmentInfo](https://developer.apple.com/documentation/appstoreserverapi/transactioncommitmentinfo)
public struct TransactionCommitmentInfo: Codable, Hashable, Sendable {
    /// Which billing period of the commitment this transaction pays (1 to `totalBillingPeriods`).
    public var billingPeriodNumber: Int32?
    public var commitmentExpiresDate: Date?
    /// In milliunits of the transaction's `currency`.
    public var commitmentPrice: Int64?
    public var totalBillingPeriods: Int32?

    public init(
        billingPeriodNumber: Int32? = nil, commitmentExpiresDate: Date? = nil, commitmentPrice: Int64? = nil,
        totalBillingPeriods: Int32? = nil
    ) {
        self.billingPeriodNumber = billingPeriodNumber
        self.commitmentExpiresDate = commitmentExpiresDate
        self.commitmentPrice = commitmentPrice
        self.totalBillingPeriods = totalBillingPeriods
    }
}
