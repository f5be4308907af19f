import Domain
import Foundation
import Testing

/// What a rescinded consent keeps from the app: every event that gives access, and a replayed
/// rescission after an operator's restore.
@Suite struct ConsentRescissionTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    /// The events each change of a chain gives, and whether each announces access.
    static func announced(_ old: SubscriptionStatus?, _ new: SubscriptionStatus, transaction: String = "t2") -> [String: Bool] {
        let state = { (status: SubscriptionStatus, transaction: String) in
            SubscriptionState(
                originalTransactionID: "o1", environment: "Sandbox", activeProductID: "pro.month", pendingProductID: nil,
                status: status, autoRenewEnabled: true, expiresAt: now + 86_400, graceExpiresAt: nil, lastTransactionID: transaction,
                lastSignedDate: now, isFamilyShared: false)
        }
        let events = SubscriptionEvents.change(
            userID: "u1", from: old.map { state($0, "t1") }, to: state(new, transaction), entitlements: { _ in ["pro"] }, now: now)
        return Dictionary(uniqueKeysWithValues: events.map { ($0.type.rawValue, ConsentRescission.announcesAccess($0)) })
    }

    @Test func eventsThatGiveAccessAreTheOnesLeftOut() {
        #expect(Self.announced(nil, .active) == ["entitlement.granted": true])
        #expect(Self.announced(.active, .active) == ["entitlement.renewed": true])
        #expect(Self.announced(.expired, .active) == ["entitlement.granted": true])
        // A grace period keeps serving; billing retry does not.
        #expect(Self.announced(.active, .grace, transaction: "t1") == ["entitlement.billing_issue": true])
        #expect(Self.announced(.grace, .billingRetry, transaction: "t1") == ["entitlement.billing_issue": false])
        #expect(Self.announced(.active, .expired, transaction: "t1") == ["entitlement.expired": false])
        #expect(Self.announced(.active, .revoked, transaction: "t1") == ["entitlement.revoked": false])
        let rescinded = ConsentRescission.event(
            userID: "u1", environment: "Sandbox", appTransactionID: "a", notificationUUID: "n", turnedOff: ["pro"], removed: [],
            now: Self.now)
        #expect(!ConsentRescission.announcesAccess(rescinded))
        let restored = ConsentRescission.restoredEvent(
            userID: "u1", environment: "Sandbox", rescindedAt: Self.now - 60, entitlements: ["pro"], operator: "o", reason: "r",
            now: Self.now)
        #expect(!ConsentRescission.announcesAccess(restored), "it names what is in force; the read API says the same")
    }

    @Test func aRescissionSignedBeforeTheRestoreNoLongerApplies() {
        #expect(ConsentRescission.applies(signedAt: Self.now, restoredAt: nil))
        #expect(ConsentRescission.applies(signedAt: nil, restoredAt: Self.now))
        #expect(!ConsentRescission.applies(signedAt: Self.now - 1, restoredAt: Self.now))
        #expect(!ConsentRescission.applies(signedAt: Self.now, restoredAt: Self.now))
        #expect(ConsentRescission.applies(signedAt: Self.now + 1, restoredAt: Self.now))
    }
}
