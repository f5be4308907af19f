import Foundation

/// The product's rule for Apple's RESCIND_CONSENT (a parent or guardian withdrew consent for the
/// app on a minor's Apple Account; Apple then stops the app from launching there).
///
/// Every account of ours that the Apple Account bought with loses its entitlements from that
/// instant, whatever its chains and promotional grants say: access the app would check must not
/// outlive the consent. What the service held only because the user consented is removed: the
/// consent to share consumption data with Apple (so no CONSUMPTION_REQUEST is answered with it).
/// Purchases, orders and the credit ledger stay: they are the record of what the parent paid.
/// Apple tells of no renewed consent, so the rule has no end of its own.
public enum ConsentRescission {
    /// What the consent-scoped removal takes, named in the event and the audit row.
    public static let consumptionDataConsent = "CONSUMPTION_DATA_CONSENT"

    /// The items as the app may use them: all off once the consent was rescinded at or before `now`.
    public static func entitlements(_ items: [EntitlementItem], rescindedAt: Date?, now: Date) -> [EntitlementItem] {
        guard let rescindedAt, rescindedAt <= now else { return items }
        return items.map { item in
            var off = item
            off.active = false
            return off
        }
    }

    /// `account.consent_rescinded` for one user, keyed by Apple's notification: a redelivery or a
    /// replay of it adds nothing.
    public static func event(
        userID: String, environment: String, appTransactionID: String, notificationUUID: String, turnedOff: [String],
        removed: [String], now: Date
    ) -> OutboundEvent {
        OutboundEvent(
            key: "\(OutboundEventType.accountConsentRescinded.rawValue):\(userID):\(notificationUUID)",
            type: .accountConsentRescinded, userID: userID, environment: environment, occurredAt: now,
            data: [
                "appTransactionId": .string(appTransactionID), "rescindedAt": OutboundValue(now),
                "entitlements": .strings(turnedOff.sorted()), "removed": .strings(removed),
                "notificationUUID": .string(notificationUUID),
            ])
    }
}
