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
