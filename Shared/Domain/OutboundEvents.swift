import Foundation

/// What the app's other services learn from us: each type names one kind of change they may act on.
public enum OutboundEventType: String, Sendable, Hashable, Codable, CaseIterable {
    case entitlementGranted = "entitlement.granted"
    case entitlementRenewed = "entitlement.renewed"
    case entitlementProductChanged = "entitlement.product_changed"
    case entitlementBillingIssue = "entitlement.billing_issue"
    case entitlementExpired = "entitlement.expired"
    case entitlementRevoked = "entitlement.revoked"
    case subscriptionRenewalChanged = "subscription.renewal_changed"
    case subscriptionRefunded = "subscription.refunded"
    case creditsGranted = "credits.granted"
    case creditsRevoked = "credits.revoked"
    case creditsCleared = "credits.cleared"
    case orderFulfilled = "order.fulfilled"
    case orderFailed = "order.failed"
    case accountConsentRescinded = "account.consent_rescinded"
    case accountConsentRestored = "account.consent_restored"
    case accountConflict = "account.conflict"
}

/// A JSON value of an event's `data` (the few kinds events carry).
public enum OutboundValue: Sendable, Hashable, Codable {
    case string(String)
    case integer(Int64)
    case bool(Bool)
    case strings([String])
    case null

    public init(_ string: String?) { self = string.map { .string($0) } ?? .null }

    /// A moment as RFC 3339 UTC with milliseconds (the REST API's spelling).
    public init(_ date: Date?) {
        self = date.map { .string(OutboundEvent.timestamp($0)) } ?? .null
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .string(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .bool(let value): try container.encode(value)
        case .strings(let value): try container.encode(value)
        case .null: try container.encodeNil()
        }
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode([String].self) {
            self = .strings(value)
        } else {
            self = .string(try container.decode(String.self))
        }
    }
}

/// One change the app may act on, before it is stored and numbered.
///
/// `key` names the change itself (the chain, the transaction, the status reached, the
/// entitlement), so the same fact arriving again, in another order, or replayed gives the same key,
/// and the store keeps one event per key: each event once.
public struct OutboundEvent: Sendable, Hashable {
    public var key: String
    public var type: OutboundEventType
    public var userID: String
    public var environment: String
    public var occurredAt: Date
    public var data: [String: OutboundValue]

    public init(
        key: String, type: OutboundEventType, userID: String, environment: String, occurredAt: Date,
        data: [String: OutboundValue]
    ) {
        self.key = key
        self.type = type
        self.userID = userID
        self.environment = environment
        self.occurredAt = occurredAt
        self.data = data
    }

    /// RFC 3339 UTC with milliseconds, as every timestamp of an event.
    public static func timestamp(_ date: Date) -> String {
        date.formatted(
            Date.ISO8601FormatStyle(includingFractionalSeconds: true, timeZone: TimeZone(identifier: "UTC")!))
    }
}

/// The events a chain's change of state gives, one per entitlement its product unlocks.
///
/// Pure: the caller passes the row before (nil for a chain first seen), the row after, both at the
/// same `now`'s status, and what the products unlock.
public enum SubscriptionEvents {
    public static func change(
        userID: String, from old: SubscriptionState?, to new: SubscriptionState,
        entitlements: (String) -> [String], now: Date
    ) -> [OutboundEvent] {
        let chain = "\(new.environment):\(new.originalTransactionID)"
        var events: [OutboundEvent] = []
        func entitlementEvents(_ type: OutboundEventType, _ step: String) {
            for entitlement in entitlements(new.activeProductID) {
                events.append(
                    OutboundEvent(
                        key: "\(type.rawValue):\(chain):\(step):\(entitlement)", type: type, userID: userID,
                        environment: new.environment, occurredAt: now,
                        data: [
                            "entitlement": .string(entitlement), "productId": .string(new.activeProductID),
                            "originalTransactionId": .string(new.originalTransactionID),
                            "status": .string(new.status.rawValue), "expiresAt": OutboundValue(new.expiresAt),
                            "willRenew": .bool(new.timeline.renews && new.status != .revoked),
                            "gracePeriodExpiresAt": OutboundValue(new.graceExpiresAt),
                        ]))
            }
        }
        let wasServing = old?.status.hasService ?? false
        let transaction = new.lastTransactionID
        let signed = Int64((new.lastSignedDate.timeIntervalSince1970 * 1000).rounded())
        switch (wasServing, new.status) {
        case (false, .active), (false, .grace):
            // The same transaction serving again (a reversed refund, an extended lapsed period) is
            // a new grant for the app: keyed by the fact that restored it, not by the first one's key.
            let again = old.map { $0.lastTransactionID == transaction } ?? false
            entitlementEvents(.entitlementGranted, again ? "\(transaction):\(signed)" : transaction)
        case (true, .active), (true, .grace):
            if let old, old.activeProductID != new.activeProductID {
                entitlementEvents(.entitlementProductChanged, transaction)
            } else if let old, old.lastTransactionID != transaction {
                entitlementEvents(.entitlementRenewed, transaction)
            }
            if new.status == .grace, old?.status != .grace {
                entitlementEvents(.entitlementBillingIssue, "\(transaction):GRACE")
            }
        case (_, .billingRetry):
            if old?.status != .billingRetry { entitlementEvents(.entitlementBillingIssue, "\(transaction):BILLING_RETRY") }
        case (_, .expired):
            if old?.status != .expired { entitlementEvents(.entitlementExpired, transaction) }
        case (_, .revoked):
            if old?.status != .revoked { entitlementEvents(.entitlementRevoked, transaction) }
        }
        // A serving chain's renewal date moved on the same transaction (RENEWAL_EXTENDED) is a
        // renewal change too: a new transaction's expiry, or a chain serving again, is announced
        // by its entitlement event.
        let extended =
            wasServing && new.status.hasService
            && (old.map { $0.lastTransactionID == transaction && $0.expiresAt != new.expiresAt } ?? false)
        if let old, old.autoRenewEnabled != new.autoRenewEnabled || old.pendingProductID != new.pendingProductID || extended,
            new.status != .revoked
        {
            events.append(
                OutboundEvent(
                    key: "\(OutboundEventType.subscriptionRenewalChanged.rawValue):\(chain):\(signed)",
                    type: .subscriptionRenewalChanged, userID: userID, environment: new.environment, occurredAt: now,
                    data: [
                        "productId": .string(new.activeProductID), "originalTransactionId": .string(new.originalTransactionID),
                        "status": .string(new.status.rawValue), "expiresAt": OutboundValue(new.expiresAt),
                        "autoRenewEnabled": .bool(new.autoRenewEnabled), "pendingProductId": OutboundValue(new.pendingProductID),
                    ]))
        }
        return events
    }
}
