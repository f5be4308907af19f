import Foundation

/// A verified Apple transaction, reduced to what business rules read. Stored once per
/// (environment, transactionID); never changed except by a newer signed version of itself.
public struct TransactionFact: Sendable, Hashable, Codable {
    public var environment: String
    public var transactionID: String
    public var originalTransactionID: String
    public var productID: String
    public var purchaseDate: Date
    public var originalPurchaseDate: Date?
    public var expiresDate: Date?
    public var revocationDate: Date?
    /// Apple's share of a prorated refund in milliunits (50000 = 50%); nil for a full refund.
    public var revocationPercentage: Int?
    public var isUpgraded: Bool
    /// `PURCHASED` or `FAMILY_SHARED` (kept raw so a new Apple value passes through).
    public var ownershipType: String
    /// Apple offer type: 1 introductory, 2 promotional, 3 offer code, 4 win-back.
    public var offerType: Int?
    /// `FREE_TRIAL`, `PAY_AS_YOU_GO`, `PAY_UP_FRONT`.
    public var offerDiscountType: String?
    /// How long the offer lasts (ISO 8601, `P3M`): the span one pay-up-front or free transaction covers.
    public var offerPeriod: String?
    /// `PURCHASE` or `RENEWAL`.
    public var transactionReason: String?
    public var appAccountToken: String?
    public var signedDate: Date
    /// The monthly charge's place in its commitment; nil for a plan billed up front.
    public var commitment: TransactionCommitment?

    public init(
        environment: String, transactionID: String, originalTransactionID: String, productID: String,
        purchaseDate: Date, originalPurchaseDate: Date? = nil, expiresDate: Date?, revocationDate: Date? = nil,
        revocationPercentage: Int? = nil, isUpgraded: Bool = false, ownershipType: String = "PURCHASED", offerType: Int? = nil,
        offerDiscountType: String? = nil, offerPeriod: String? = nil, transactionReason: String? = nil,
        appAccountToken: String? = nil, signedDate: Date, commitment: TransactionCommitment? = nil
    ) {
        self.commitment = commitment
        self.environment = environment
        self.transactionID = transactionID
        self.originalTransactionID = originalTransactionID
        self.productID = productID
        self.purchaseDate = purchaseDate
        self.originalPurchaseDate = originalPurchaseDate
        self.expiresDate = expiresDate
        self.revocationDate = revocationDate
        self.revocationPercentage = revocationPercentage
        self.isUpgraded = isUpgraded
        self.ownershipType = ownershipType
        self.offerType = offerType
        self.offerDiscountType = offerDiscountType
        self.offerPeriod = offerPeriod
        self.transactionReason = transactionReason
        self.appAccountToken = appAccountToken
        self.signedDate = signedDate
    }

    public var isFamilyShared: Bool { ownershipType == "FAMILY_SHARED" }
    /// The kind of offer the transaction was bought with, if any.
    public var offer: OfferKind? { offerType.flatMap(OfferKind.init(rawValue:)) }
    /// A free period of any offer kind (Apple's `FREE_TRIAL` discount type is used by all four).
    public var isFreePeriod: Bool { offer != nil && offerDiscountType == "FREE_TRIAL" }

    /// Of two signed versions of the same transaction, the one to keep: the later signature
    /// (a refund re-signs the transaction with a revocation date; a reversal re-signs it without).
    public func isNewerVersion(than other: TransactionFact) -> Bool {
        (signedDate, revocationDate == nil ? 0 : 1) > (other.signedDate, other.revocationDate == nil ? 0 : 1)
    }
}

/// Apple's renewal info for a chain; only the newest by `signedDate` is kept.
public struct RenewalFact: Sendable, Hashable, Codable {
    public var environment: String
    public var originalTransactionID: String
    public var productID: String
    public var autoRenewProductID: String?
    public var autoRenewEnabled: Bool
    public var isInBillingRetryPeriod: Bool
    public var gracePeriodExpiresDate: Date?
    public var expirationIntent: Int?
    public var priceIncreaseStatus: Int?
    public var renewalDate: Date?
    /// The price of the next renewal, in milliunits of `renewalCurrency` (Apple's `renewalPrice`).
    public var renewalPrice: Int64?
    /// ISO 4217 (Apple's `currency` of the renewal info).
    public var renewalCurrency: String?
    public var signedDate: Date
    /// What the commitment renews into; nil outside a commitment.
    public var commitment: RenewalCommitment?

    public init(
        environment: String, originalTransactionID: String, productID: String, autoRenewProductID: String?,
        autoRenewEnabled: Bool, isInBillingRetryPeriod: Bool = false, gracePeriodExpiresDate: Date? = nil,
        expirationIntent: Int? = nil, priceIncreaseStatus: Int? = nil, renewalDate: Date? = nil, renewalPrice: Int64? = nil,
        renewalCurrency: String? = nil, signedDate: Date, commitment: RenewalCommitment? = nil
    ) {
        self.commitment = commitment
        self.environment = environment
        self.originalTransactionID = originalTransactionID
        self.productID = productID
        self.autoRenewProductID = autoRenewProductID
        self.autoRenewEnabled = autoRenewEnabled
        self.isInBillingRetryPeriod = isInBillingRetryPeriod
        self.gracePeriodExpiresDate = gracePeriodExpiresDate
        self.expirationIntent = expirationIntent
        self.priceIncreaseStatus = priceIncreaseStatus
        self.renewalDate = renewalDate
        self.renewalPrice = renewalPrice
        self.renewalCurrency = renewalCurrency
        self.signedDate = signedDate
    }

    /// Whether this version should replace `other` (newest signature wins; ties keep the stored one).
    public func isNewer(than other: RenewalFact) -> Bool { signedDate > other.signedDate }
}

/// Everything stored about one subscription chain: the input of the projection.
public struct ChainFacts: Sendable, Hashable {
    public var transactions: [TransactionFact]
    public var renewal: RenewalFact?

    public init(transactions: [TransactionFact] = [], renewal: RenewalFact? = nil) {
        self.transactions = transactions
        self.renewal = renewal
    }

    /// Adds a fact the way storage does: one version per transaction id, newest renewal info.
    public mutating func record(_ transaction: TransactionFact) {
        if let index = transactions.firstIndex(where: { $0.transactionID == transaction.transactionID }) {
            if transaction.isNewerVersion(than: transactions[index]) { transactions[index] = transaction }
        } else {
            transactions.append(transaction)
        }
    }

    public mutating func record(_ renewal: RenewalFact) {
        if let current = self.renewal, !renewal.isNewer(than: current) { return }
        self.renewal = renewal
    }
}
