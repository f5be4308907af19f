import Domain
import Foundation
import Testing

/// The events a chain's change of state gives: one kind per change, keyed by what changed, so a
/// change seen again gives the same keys.
@Suite struct SubscriptionEventsTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)

    static func state(
        _ status: SubscriptionStatus, transaction: String = "t1", product: String = "pro.month", autoRenew: Bool = true
    ) -> SubscriptionState {
        SubscriptionState(
            originalTransactionID: "o1", environment: "Sandbox", activeProductID: product, pendingProductID: nil,
            status: status, autoRenewEnabled: autoRenew, expiresAt: now.addingTimeInterval(86_400), graceExpiresAt: nil,
            lastTransactionID: transaction, lastSignedDate: now, isFamilyShared: false)
    }

    static func types(_ old: SubscriptionState?, _ new: SubscriptionState) -> [OutboundEventType] {
        SubscriptionEvents.change(userID: "u1", from: old, to: new, entitlements: { _ in ["pro"] }, now: now).map(\.type)
    }

    @Test func eachChangeGivesItsEvent() {
        #expect(Self.types(nil, Self.state(.active)) == [.entitlementGranted])
        #expect(Self.types(Self.state(.active), Self.state(.active)) == [])
        #expect(Self.types(Self.state(.active), Self.state(.active, transaction: "t2")) == [.entitlementRenewed])
        #expect(
            Self.types(Self.state(.active), Self.state(.active, transaction: "t2", product: "pro.year"))
                == [.entitlementProductChanged])
        #expect(Self.types(Self.state(.active), Self.state(.grace)) == [.entitlementBillingIssue])
        #expect(Self.types(Self.state(.grace), Self.state(.billingRetry)) == [.entitlementBillingIssue])
        #expect(Self.types(Self.state(.billingRetry), Self.state(.active, transaction: "t2")) == [.entitlementGranted])
        #expect(Self.types(Self.state(.active), Self.state(.expired)) == [.entitlementExpired])
        #expect(Self.types(Self.state(.active), Self.state(.revoked)) == [.entitlementRevoked])
        #expect(Self.types(Self.state(.active), Self.state(.active, autoRenew: false)) == [.subscriptionRenewalChanged])
    }

    /// RENEWAL_EXTENDED moves the expiry of the same transaction: the app hears of the new date.
    @Test func anExtendedRenewalDateIsARenewalChange() {
        var extended = Self.state(.active)
        extended.expiresAt = Self.now.addingTimeInterval(8 * 86_400)
        #expect(Self.types(Self.state(.active), extended) == [.subscriptionRenewalChanged])
        #expect(Self.types(Self.state(.active), Self.state(.active, transaction: "t2")) == [.entitlementRenewed])
    }

    /// A reversed refund serves the same transaction again: its `entitlement.granted` has a key of
    /// its own, so the outbox does not take it for the first grant's.
    @Test func aTransactionServingAgainIsGrantedUnderANewKey() {
        let first = SubscriptionEvents.change(userID: "u1", from: nil, to: Self.state(.active), entitlements: { _ in ["pro"] }, now: Self.now)
        var restored = Self.state(.active)
        restored.lastSignedDate = Self.now.addingTimeInterval(3600)
        let again = SubscriptionEvents.change(
            userID: "u1", from: Self.state(.revoked), to: restored, entitlements: { _ in ["pro"] }, now: Self.now)
        #expect(again.map(\.type) == [.entitlementGranted])
        var revoked = Self.state(.revoked)
        revoked.expiresAt = Self.now
        #expect(Self.types(revoked, restored) == [.entitlementGranted], "the restored expiry is no extension")
        #expect(Set(first.map(\.key)).isDisjoint(with: again.map(\.key)))
    }

    @Test func theSameChangeGivesTheSameKeysAndOnePerEntitlement() {
        let change = { SubscriptionEvents.change(userID: "u1", from: nil, to: Self.state(.active), entitlements: { _ in ["pro", "ai"] }, now: $0) }
        let first = change(Self.now)
        let later = change(Self.now.addingTimeInterval(60))
        #expect(first.map(\.key) == later.map(\.key))
        #expect(Set(first.compactMap { if case .string(let e) = $0.data["entitlement"] { e } else { nil } }) == ["pro", "ai"])
    }
}
