/// Why an order exists.
public enum OrderType: String, Sendable, Codable, CaseIterable {
    /// The user's click in the app.
    case initial = "INITIAL"
    /// A renewal charge: created by the processor, never by a client.
    case renewal = "RENEWAL"
    /// An upgrade or crossgrade that took effect with a new transaction.
    case change = "CHANGE"
    /// A real charge that matched no open order (resubscribe, or after a cancelled/expired intent).
    case recovery = "RECOVERY"
}

/// The life of a purchase order.
public enum OrderStatus: String, Sendable, Codable, CaseIterable {
    case created = "CREATED"
    case pending = "PENDING"
    case verified = "VERIFIED"
    case fulfilled = "FULFILLED"
    case cancelled = "CANCELLED"
    case expired = "EXPIRED"
    case failedRetryable = "FAILED_RETRYABLE"
    case failed = "FAILED"

    /// No transition leaves these.
    public var isFinal: Bool { self == .fulfilled || self == .failed }

    /// Still a purchase intent the user may complete (counts toward "one open initial order").
    public var isOpen: Bool { self == .created || self == .pending }

    /// The order state machine. A real Apple charge reopens a CANCELLED or EXPIRED order
    /// (the cancel was only an intent); a retryable failure never goes back to CREATED.
    public func canMove(to next: OrderStatus) -> Bool {
        switch (self, next) {
        case (.created, .pending), (.created, .cancelled), (.created, .expired), (.pending, .expired):
            return true
        case (.created, .verified), (.pending, .verified), (.cancelled, .verified), (.expired, .verified):
            return true
        case (.verified, .fulfilled), (.verified, .failedRetryable), (.failedRetryable, .fulfilled):
            return true
        case (let from, .failed):
            return !from.isFinal
        default:
            return false
        }
    }
}

/// Why an order ended `FAILED`: a verified Apple transaction was refused for it, and no retry of
/// that transaction can ever succeed. Stable: clients and the order's events carry these codes.
/// Refusals that may pass later (a frozen chain, an account conflict an operator resolves) and
/// uploads that could not be verified at all leave the order open.
public enum OrderFailureCode: String, Sendable, Codable, CaseIterable {
    /// Apple refunded or revoked the transaction: it fulfils no order.
    case transactionRevoked = "TRANSACTION_REVOKED"
    /// The transaction's period was over when it was uploaded for a new order.
    case transactionExpired = "TRANSACTION_EXPIRED"
    /// The transaction is for another product than the order.
    case productMismatch = "ORDER_PRODUCT_MISMATCH"
    /// The transaction fulfilled another order already.
    case transactionAlreadyUsed = "TRANSACTION_ALREADY_USED"
    /// Family-shared access is not a paid order.
    case familyShared = "FAMILY_SHARED"
    /// A Sandbox purchase for a user who is no test user of a Production deployment.
    case sandboxRefused = "SANDBOX_REFUSED"
}
