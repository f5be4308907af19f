/// What a notification asks the processor to do, from domain.md's notification matrix.
public enum NotificationAction: Sendable, Equatable {
    /// Connectivity test or a pure record (REFUND_DECLINED): store, change nothing.
    case recordOnly
    /// A transaction to apply (purchase, renewal, recovery, upgrade, offer): order, state, grant.
    case applyTransaction(OrderType)
    /// Only renewal info changed (auto-renew flag, pending product, grace/billing retry, price consent,
    /// renewal date); the projection recomputes, nothing is granted.
    case applyRenewalInfo
    /// The transaction was refunded or revoked: recompute and take back what remains of its grant.
    case revokeTransaction
    /// A refund was reversed: recompute and restore what was taken back.
    case restoreTransaction
    /// Apple asks for consumption information (answered only with the user's consent).
    case consumptionRequest
    /// A parent or guardian withdrew consent for the app (RESCIND_CONSENT): the accounts of the
    /// Apple Account it names lose their entitlements and their consent-scoped data.
    case rescindConsent
    /// A type or subtype this version does not know: stored, counted, acknowledged.
    case unknown
}

/// The matrix itself. Unknown values never fail: they map to `.unknown`.
public enum NotificationMatrix {
    /// Not Apple's: the type of the events a worker stores for Apple's answer to Get All
    /// Subscription Statuses (a re-query), applied like any transaction Apple signed.
    public static let statusRequery = "STATUS_REQUERY"
    /// Ours, not Apple's: a transaction from Get Transaction History that a user's import stored.
    public static let historyImport = "HISTORY_IMPORT"

    public static func action(type: String, subtype: String?) -> NotificationAction {
        switch (type, subtype) {
        case ("TEST", _), ("REFUND_DECLINED", _), ("EXTERNAL_PURCHASE_TOKEN", _),
            ("METADATA_UPDATE", _), ("MIGRATION", _), ("PRICE_CHANGE", _):
            // External purchase tokens and the Advanced Commerce types concern no In-App Purchase
            // this service fulfils: stored and acknowledged.
            return .recordOnly
        case ("RESCIND_CONSENT", _):
            return .rescindConsent
        case ("SUBSCRIBED", "INITIAL_BUY"), ("ONE_TIME_CHARGE", _):
            // ONE_TIME_CHARGE: a consumable (credit pack) bought; granted once per transaction.
            return .applyTransaction(.initial)
        case ("SUBSCRIBED", "RESUBSCRIBE"):
            return .applyTransaction(.recovery)
        case ("DID_RENEW", nil), ("DID_RENEW", "BILLING_RECOVERY"):
            return .applyTransaction(.renewal)
        case ("DID_CHANGE_RENEWAL_PREF", "UPGRADE"):
            return .applyTransaction(.change)
        case ("OFFER_REDEEMED", "INITIAL_BUY"):
            return .applyTransaction(.initial)
        case ("OFFER_REDEEMED", "RESUBSCRIBE"):
            return .applyTransaction(.recovery)
        case ("OFFER_REDEEMED", "UPGRADE"):
            return .applyTransaction(.change)
        case ("OFFER_REDEEMED", "DOWNGRADE"):
            return .applyRenewalInfo
        case ("OFFER_REDEEMED", _), (statusRequery, _):
            return .applyTransaction(.renewal)
        case (historyImport, _):
            return .applyTransaction(.recovery)
        case ("DID_FAIL_TO_RENEW", nil), ("DID_FAIL_TO_RENEW", "GRACE_PERIOD"), ("GRACE_PERIOD_EXPIRED", _),
            ("EXPIRED", _), ("DID_CHANGE_RENEWAL_STATUS", _), ("DID_CHANGE_RENEWAL_PREF", _),
            ("PRICE_INCREASE", _), ("RENEWAL_EXTENDED", _), ("RENEWAL_EXTENSION", _):
            return .applyRenewalInfo
        case ("REFUND", _), ("REVOKE", _):
            return .revokeTransaction
        case ("REFUND_REVERSED", _):
            return .restoreTransaction
        case ("CONSUMPTION_REQUEST", _):
            return .consumptionRequest
        default:
            return .unknown
        }
    }

    /// Every notification type of App Store Server Notifications V2 in Apple's documentation
    /// (notificationType, subtype; 2026), each with the subtypes Apple sends with it (nil: none).
    /// A test maps each through `action` and requires a deliberate handling for all of them.
    public static let documented: [(type: String, subtypes: [String?])] = [
        ("CONSUMPTION_REQUEST", [nil]),
        ("DID_CHANGE_RENEWAL_PREF", ["UPGRADE", "DOWNGRADE", nil]),
        ("DID_CHANGE_RENEWAL_STATUS", ["AUTO_RENEW_ENABLED", "AUTO_RENEW_DISABLED"]),
        ("DID_FAIL_TO_RENEW", ["GRACE_PERIOD", nil]),
        ("DID_RENEW", ["BILLING_RECOVERY", nil]),
        ("EXPIRED", ["VOLUNTARY", "BILLING_RETRY", "PRICE_INCREASE", "PRODUCT_NOT_FOR_SALE"]),
        ("EXTERNAL_PURCHASE_TOKEN", ["UNREPORTED", "CREATED", "ACTIVE_TOKEN_REMINDER"]),
        ("GRACE_PERIOD_EXPIRED", [nil]),
        ("METADATA_UPDATE", [nil]),
        ("MIGRATION", [nil]),
        ("OFFER_REDEEMED", ["INITIAL_BUY", "RESUBSCRIBE", "UPGRADE", "DOWNGRADE", nil]),
        ("ONE_TIME_CHARGE", [nil]),
        ("PRICE_CHANGE", [nil]),
        ("PRICE_INCREASE", ["PENDING", "ACCEPTED"]),
        ("REFUND", [nil]),
        ("REFUND_DECLINED", [nil]),
        ("REFUND_REVERSED", [nil]),
        ("RENEWAL_EXTENDED", [nil]),
        ("RENEWAL_EXTENSION", ["SUMMARY", "FAILURE"]),
        ("RESCIND_CONSENT", [nil]),
        ("REVOKE", [nil]),
        ("SUBSCRIBED", ["INITIAL_BUY", "RESUBSCRIBE"]),
        ("TEST", [nil]),
    ]

    /// Notifications worth an operator's attention on top of their business effect.
    public static func alerts(type: String, subtype: String?) -> Bool {
        type == "EXPIRED" && subtype == "PRODUCT_NOT_FOR_SALE"
    }
}
