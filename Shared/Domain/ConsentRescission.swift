import Foundation

/// The product's rule for Apple's RESCIND_CONSENT (a parent or guardian withdrew consent for the
/// app on a minor's Apple Account; Apple then stops the app from launching there).
///
/// Every account of ours that the Apple Account bought with loses its entitlements from that
/// instant, whatever its chains and promotional grants say: access the app would check must not
/// outlive the consent. What the service held only because the user consented is removed: the
/// consent to share consumption data with Apple (so no CONSUMPTION_REQUEST is answered with it).
/// Purchases, orders and the credit ledger stay: they are the record of what the parent paid, but
/// no credit is spent while the consent is withdrawn (spending is using the app).
/// Apple tells of no renewed consent, so the rule has no end of its own: an operator restores it
/// (`account.consent_restored`) when the parent grants it again or Apple named the wrong account.
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

    /// Whether an event tells the app to give access: a grant, a renewal, a product change, a grace
    /// period that keeps serving. None is written for an account whose consent was rescinded.
    ///
    /// Left out rather than written with a flag: the event's type is the announcement, and a
    /// consumer acting on `entitlement.renewed` would re-open access without reading a new field
    /// (every consumer written before it would). Nothing is lost: `account.consent_restored`
    /// names the entitlements in force again when access comes back.
    public static func announcesAccess(_ event: OutboundEvent) -> Bool {
        switch event.type {
        case .entitlementGranted, .entitlementRenewed, .entitlementProductChanged: true
        case .entitlementBillingIssue: event.data["status"] == .string(SubscriptionStatus.grace.rawValue)
        default: false
        }
    }

    /// Whether a RESCIND_CONSENT Apple signed at `signedAt` still applies to an account whose
    /// consent an operator restored at `restoredAt`: not when it is the one the operator answered
    /// (signed before), replayed; a later one is the parent withdrawing it again.
    public static func applies(signedAt: Date?, restoredAt: Date?) -> Bool {
        guard let signedAt, let restoredAt else { return true }
        return signedAt > restoredAt
    }

    /// `account.consent_restored`: an operator gave back what a rescission turned off; the
    /// entitlements read as their chains and grants say from `now`. Keyed by the instant, so each
    /// restoration is told once.
    public static func restoredEvent(
        userID: String, environment: String, rescindedAt: Date, entitlements: [String], operator operatorName: String,
        reason: String, now: Date
    ) -> OutboundEvent {
        OutboundEvent(
            key: "\(OutboundEventType.accountConsentRestored.rawValue):\(userID):\(OutboundEvent.timestamp(now))",
            type: .accountConsentRestored, userID: userID, environment: environment, occurredAt: now,
            data: [
                "rescindedAt": OutboundValue(rescindedAt), "restoredAt": OutboundValue(now),
                "entitlements": .strings(entitlements.sorted()), "operator": .string(operatorName), "reason": .string(reason),
            ])
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
