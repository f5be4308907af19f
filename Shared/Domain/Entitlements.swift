import Foundation

/// Where an entitlement comes from: a purchase on Apple's side, or an operator's promotional grant.
public enum EntitlementSource: String, Sendable, Hashable, Codable {
    case apple = "APPLE"
    case promotional = "PROMOTIONAL"
}

/// A transaction chain as the entitlements see it: its product and its status at the instant asked about.
public struct EntitlementChain: Sendable, Hashable {
    public var environment: String
    public var originalTransactionID: String
    public var productID: String
    /// The status at the instant the entitlements are computed for (not the stored one).
    public var status: SubscriptionStatus
    public var autoRenewEnabled: Bool
    public var expiresAt: Date?
    public var graceExpiresAt: Date?
    /// See `SubscriptionState.commitmentEndsAt`.
    public var commitmentEndsAt: Date?

    public init(
        environment: String, originalTransactionID: String, productID: String, status: SubscriptionStatus,
        autoRenewEnabled: Bool, expiresAt: Date?, graceExpiresAt: Date?, commitmentEndsAt: Date? = nil
    ) {
        self.environment = environment
        self.originalTransactionID = originalTransactionID
        self.productID = productID
        self.status = status
        self.autoRenewEnabled = autoRenewEnabled
        self.expiresAt = expiresAt
        self.graceExpiresAt = graceExpiresAt
        self.commitmentEndsAt = commitmentEndsAt
    }

    /// Whether another period follows while the chain serves: auto-renew on, or a commitment's
    /// charges remain (a cancellation inside the commitment takes effect at its end).
    public var willRenew: Bool {
        let renews =
            autoRenewEnabled || CommitmentRules.chargeFollows(periodEnd: expiresAt, commitmentEndsAt: commitmentEndsAt)
        return renews && status.hasService
    }
}

/// An operator's promotional grant of one entitlement to one user (`entitlement_grant`).
public struct PromotionalGrant: Sendable, Hashable, Codable {
    public var grantID: Int64
    public var userID: String
    public var entitlement: String
    public var environment: String
    public var startsAt: Date
    public var expiresAt: Date
    public var reason: String
    public var grantedBy: String
    public var createdAt: Date
    public var revokedAt: Date?
    public var revokedBy: String?
    public var revokeReason: String?
    /// When the clock job ended it (and wrote its `entitlement.expired` event).
    public var endedAt: Date?

    public init(
        grantID: Int64, userID: String, entitlement: String, environment: String, startsAt: Date, expiresAt: Date,
        reason: String, grantedBy: String, createdAt: Date, revokedAt: Date? = nil, revokedBy: String? = nil,
        revokeReason: String? = nil, endedAt: Date? = nil
    ) {
        self.grantID = grantID
        self.userID = userID
        self.entitlement = entitlement
        self.environment = environment
        self.startsAt = startsAt
        self.expiresAt = expiresAt
        self.reason = reason
        self.grantedBy = grantedBy
        self.createdAt = createdAt
        self.revokedAt = revokedAt
        self.revokedBy = revokedBy
        self.revokeReason = revokeReason
        self.endedAt = endedAt
    }

    /// Whether it gives its entitlement at `now`: started, not revoked by then, not yet expired.
    /// Judged on the clock, not on `endedAt`: the clock job may lag its expiry by seconds.
    public func isInForce(at now: Date) -> Bool {
        startsAt <= now && now < expiresAt && (revokedAt.map { now < $0 } ?? true)
    }

    /// When it stops (or stopped) giving access: its expiry, or its revocation if earlier.
    public var endsAt: Date { min(expiresAt, revokedAt ?? expiresAt) }
}

/// One entitlement of a user at one instant, as the entitlements API answers it (every field
/// written, null when it has no value).
public struct EntitlementItem: Sendable, Hashable, Codable {
    public var entitlement: String
    public var active: Bool
    public var source: EntitlementSource
    /// The representing chain's status (APPLE only).
    public var status: SubscriptionStatus?
    public var productID: String?
    public var originalTransactionID: String?
    public var environment: String?
    /// The chain's expiry (APPLE), or the grant's end (PROMOTIONAL).
    public var expiresAt: Date?
    public var willRenew: Bool
    public var gracePeriodExpiresAt: Date?
    /// The end of a promotional grant in force beside an Apple chain that gives the same entitlement.
    public var promotionalExpiresAt: Date?

    public init(
        entitlement: String, active: Bool, source: EntitlementSource, status: SubscriptionStatus? = nil,
        productID: String? = nil, originalTransactionID: String? = nil, environment: String? = nil,
        expiresAt: Date? = nil, willRenew: Bool = false, gracePeriodExpiresAt: Date? = nil,
        promotionalExpiresAt: Date? = nil
    ) {
        self.entitlement = entitlement
        self.active = active
        self.source = source
        self.status = status
        self.productID = productID
        self.originalTransactionID = originalTransactionID
        self.environment = environment
        self.expiresAt = expiresAt
        self.willRenew = willRenew
        self.gracePeriodExpiresAt = gracePeriodExpiresAt
        self.promotionalExpiresAt = promotionalExpiresAt
    }

    private enum CodingKeys: String, CodingKey {
        case entitlement, active, source, status, productId, originalTransactionId, environment, expiresAt, willRenew
        case gracePeriodExpiresAt, promotionalExpiresAt
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            entitlement: try container.decode(String.self, forKey: .entitlement), active: try container.decode(Bool.self, forKey: .active),
            source: try container.decode(EntitlementSource.self, forKey: .source),
            status: try container.decodeIfPresent(SubscriptionStatus.self, forKey: .status),
            productID: try container.decodeIfPresent(String.self, forKey: .productId),
            originalTransactionID: try container.decodeIfPresent(String.self, forKey: .originalTransactionId),
            environment: try container.decodeIfPresent(String.self, forKey: .environment),
            expiresAt: try container.decodeIfPresent(Date.self, forKey: .expiresAt),
            willRenew: try container.decode(Bool.self, forKey: .willRenew),
            gracePeriodExpiresAt: try container.decodeIfPresent(Date.self, forKey: .gracePeriodExpiresAt),
            promotionalExpiresAt: try container.decodeIfPresent(Date.self, forKey: .promotionalExpiresAt))
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(entitlement, forKey: .entitlement)
        try container.encode(active, forKey: .active)
        try container.encode(source, forKey: .source)
        // Optionals through `encode`, not `encodeIfPresent`: an absent value is an explicit null.
        try container.encode(status, forKey: .status)
        try container.encode(productID, forKey: .productId)
        try container.encode(originalTransactionID, forKey: .originalTransactionId)
        try container.encode(environment, forKey: .environment)
        try container.encode(expiresAt, forKey: .expiresAt)
        try container.encode(willRenew, forKey: .willRenew)
        try container.encode(gracePeriodExpiresAt, forKey: .gracePeriodExpiresAt)
        try container.encode(promotionalExpiresAt, forKey: .promotionalExpiresAt)
    }
}

/// A promotional grant as operators see it (admin API, `subsctl --json`, the support case):
/// the row under the API's names, every field written, and whether it is in force.
public struct PromotionalGrantView: Sendable, Hashable, Codable {
    public var grantId: Int64
    public var userId: String
    public var entitlement: String
    public var startsAt: Date
    public var expiresAt: Date
    public var reason: String
    public var grantedBy: String
    public var createdAt: Date
    public var revokedAt: Date?
    public var revokedBy: String?
    public var revokeReason: String?
    public var endedAt: Date?
    /// Whether it gives its entitlement at the instant the view was made.
    public var inForce: Bool

    public init(_ grant: PromotionalGrant, now: Date) {
        grantId = grant.grantID
        userId = grant.userID
        entitlement = grant.entitlement
        startsAt = grant.startsAt
        expiresAt = grant.expiresAt
        reason = grant.reason
        grantedBy = grant.grantedBy
        createdAt = grant.createdAt
        revokedAt = grant.revokedAt
        revokedBy = grant.revokedBy
        revokeReason = grant.revokeReason
        endedAt = grant.endedAt
        inForce = grant.isInForce(at: now)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(grantId, forKey: .grantId)
        try container.encode(userId, forKey: .userId)
        try container.encode(entitlement, forKey: .entitlement)
        try container.encode(startsAt, forKey: .startsAt)
        try container.encode(expiresAt, forKey: .expiresAt)
        try container.encode(reason, forKey: .reason)
        try container.encode(grantedBy, forKey: .grantedBy)
        try container.encode(createdAt, forKey: .createdAt)
        try container.encode(revokedAt, forKey: .revokedAt)
        try container.encode(revokedBy, forKey: .revokedBy)
        try container.encode(revokeReason, forKey: .revokeReason)
        try container.encode(endedAt, forKey: .endedAt)
        try container.encode(inForce, forKey: .inForce)
    }
}

/// What a user may use now, in words and in items, with every promotional grant they had: the
/// admin API's read, `subsctl entitlements show` and the top of a support case.
public struct EntitlementOverview: Sendable, Hashable, Codable {
    public var userId: String
    /// `Entitlements.summary` of the items.
    public var summary: String
    public var entitlements: [EntitlementItem]
    public var grants: [PromotionalGrantView]
    /// When a parent's RESCIND_CONSENT turned every entitlement off (absent while the consent holds):
    /// the reason the items read inactive whatever their chains and grants say.
    public var consentRescindedAt: Date?

    public init(userID: String, items: [EntitlementItem], grants: [PromotionalGrant], consentRescindedAt: Date? = nil, now: Date) {
        userId = userID
        summary = Entitlements.summary(items)
        if let consentRescindedAt, consentRescindedAt <= now {
            self.consentRescindedAt = consentRescindedAt
            summary += " (consent rescinded on \(Entitlements.day(consentRescindedAt)))"
        }
        entitlements = items
        self.grants = grants.map { PromotionalGrantView($0, now: now) }
    }
}

/// What a user may use at one instant: derived from the chains, the promotional grants and the
/// catalogue's product → entitlements, never stored.
public enum Entitlements {
    /// An entitlement identifier: `[a-z0-9_.-]{1,64}`.
    public static func isIdentifier(_ text: String) -> Bool {
        (1...64).contains(text.utf8.count)
            && text.utf8.allSatisfy {
                (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".")
                    || $0 == UInt8(ascii: "-")
            }
    }

    /// One item per entitlement the user ever had (by a chain or a grant), sorted by name.
    ///
    /// When several chains give an entitlement, the one with service now represents it, and among
    /// equals the one expiring last (a chain without expiry counts as the latest): the app then
    /// shows the access that lasts, and an expired chain never hides a live one. An Apple chain
    /// with service wins over a promotional grant in force (`source` APPLE, the grant's end in
    /// `promotionalExpiresAt`), since the purchase is what renews; a grant in force beside only
    /// lapsed chains makes the item PROMOTIONAL. With nothing in force, a chain still represents
    /// it (its lapsed status says why), else the grant that ended last.
    public static func items(
        chains: [EntitlementChain], grants: [PromotionalGrant], entitlementsOf: (String) -> [String], now: Date
    ) -> [EntitlementItem] {
        var chainsBy: [String: [EntitlementChain]] = [:]
        for chain in chains {
            for entitlement in Set(entitlementsOf(chain.productID)) { chainsBy[entitlement, default: []].append(chain) }
        }
        var grantsBy: [String: [PromotionalGrant]] = [:]
        for grant in grants { grantsBy[grant.entitlement, default: []].append(grant) }
        let names = Set(chainsBy.keys).union(grantsBy.keys).sorted()
        return names.map { name in
            let chain = chainsBy[name]?.max(by: { precedes($1, $0) })
            let inForce = grantsBy[name, default: []].filter { $0.isInForce(at: now) }.max { $0.expiresAt < $1.expiresAt }
            if let chain, chain.status.hasService || inForce == nil {
                return EntitlementItem(
                    entitlement: name, active: chain.status.hasService || inForce != nil, source: .apple, status: chain.status,
                    productID: chain.productID, originalTransactionID: chain.originalTransactionID, environment: chain.environment,
                    expiresAt: chain.expiresAt, willRenew: chain.willRenew,
                    gracePeriodExpiresAt: chain.graceExpiresAt, promotionalExpiresAt: inForce?.expiresAt)
            }
            // No chain with service: the grant in force, else the one that ended last.
            let grant = inForce ?? grantsBy[name, default: []].max { ($0.endsAt, $0.grantID) < ($1.endsAt, $1.grantID) }
            return EntitlementItem(
                entitlement: name, active: inForce != nil, source: .promotional, expiresAt: grant?.endsAt, willRenew: false)
        }
    }

    /// Whether `a` represents an entitlement before `b`: service first, then the later expiry
    /// (none: latest), then the larger original transaction id so the choice never depends on order.
    static func precedes(_ a: EntitlementChain, _ b: EntitlementChain) -> Bool {
        if a.status.hasService != b.status.hasService { return a.status.hasService }
        let aExpiry = a.expiresAt ?? .distantFuture
        let bExpiry = b.expiresAt ?? .distantFuture
        if aExpiry != bExpiry { return aExpiry > bExpiry }
        return (a.environment, a.originalTransactionID) > (b.environment, b.originalTransactionID)
    }

    /// The access in words for a person (the support console's first line): "pro until
    /// 2027-01-05, renews", "pro (promotional) until 2026-12-14", or "no entitlement".
    public static func summary(_ items: [EntitlementItem]) -> String {
        let active = items.filter(\.active)
        guard !active.isEmpty else { return "no entitlement" }
        return active.map { item in
            var text = item.entitlement
            if item.source == .promotional { text += " (promotional)" }
            if let expiresAt = item.expiresAt {
                text += " until \(day(expiresAt))"
            }
            if item.status == .grace { text += " (billing grace" + (item.gracePeriodExpiresAt.map { " until \(day($0))" } ?? "") + ")" }
            if item.source == .apple { text += item.willRenew ? ", renews" : ", does not renew" }
            if let promotional = item.promotionalExpiresAt { text += ", promotional until \(day(promotional))" }
            return text
        }.joined(separator: "; ")
    }

    /// A promotional grant may last at most this long (ten years): a typo in a date should not give forever.
    public static let longestGrant: TimeInterval = 10 * 366 * 86_400

    /// Why a grant's end was refused.
    public enum GrantEndProblem: Error, Sendable, Equatable {
        /// Neither or both of an end and a duration.
        case endOrDuration
        /// Not an ISO 8601 duration, or not a positive one.
        case badDuration
        case notInFuture
        case tooLong
    }

    /// When a grant made at `now` ends: at `expiresAt`, or `duration` after `now` (exactly one given).
    public static func grantEnd(expiresAt: Date?, duration: String?, now: Date) throws(GrantEndProblem) -> Date {
        let end: Date
        switch (expiresAt, duration) {
        case (let date?, nil): end = date
        case (nil, let duration?):
            guard let date = Entitlements.end(of: duration, from: now) else { throw .badDuration }
            end = date
        default: throw .endOrDuration
        }
        guard end > now else { throw .notInFuture }
        guard end.timeIntervalSince(now) <= longestGrant else { throw .tooLong }
        return end
    }

    /// The end of an ISO 8601 duration (`P7D`, `P1M`, `PT12H`, `P1Y2M10DT2H30M`, `P2W`) started at
    /// `start`, on the UTC calendar (a month from Jan 31 is Feb 28/29); nil when it is not one or is
    /// not positive.
    public static func end(of duration: String, from start: Date) -> Date? {
        var components = DateComponents()
        var rest = Substring(duration)
        guard rest.first == "P", rest.count > 1 else { return nil }
        rest = rest.dropFirst()
        var inTime = false
        var any = false
        var anyTime = false
        while !rest.isEmpty {
            if rest.first == "T" {
                guard !inTime else { return nil }
                inTime = true
                rest = rest.dropFirst()
                continue
            }
            let digits = rest.prefix(while: \.isASCII).prefix(while: \.isNumber)
            guard !digits.isEmpty, digits.count <= 6, let value = Int(digits) else { return nil }
            rest = rest.dropFirst(digits.count)
            guard let unit = rest.first else { return nil }
            rest = rest.dropFirst()
            switch (inTime, unit) {
            case (false, "Y"): components.year = value
            case (false, "M"): components.month = value
            case (false, "W"): components.day = (components.day ?? 0) + 7 * value
            case (false, "D"): components.day = (components.day ?? 0) + value
            case (true, "H"): components.hour = value
            case (true, "M"): components.minute = value
            case (true, "S"): components.second = value
            default: return nil
            }
            any = true
            anyTime = anyTime || inTime
        }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        guard any, inTime == anyTime, let end = calendar.date(byAdding: components, to: start), end > start else { return nil }
        return end
    }

    static func day(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(timeZone: TimeZone(identifier: "UTC")!).year().month().day())
    }
}
