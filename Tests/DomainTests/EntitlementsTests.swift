import Domain
import Foundation
import Testing

/// What a user may use at an instant, from chains, promotional grants and the catalogue's
/// product → entitlements, with the instant as an input.
@Suite struct EntitlementsTests {
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let day: TimeInterval = 86_400
    static let unlocks: [String: [String]] = [
        "pro.month": ["pro"], "pro.year": ["pro", "export"], "starter.month": ["starter"],
    ]

    static func chain(
        _ id: String, _ status: SubscriptionStatus, product: String = "pro.month", expires: TimeInterval? = day,
        grace: TimeInterval? = nil, autoRenew: Bool = true
    ) -> EntitlementChain {
        EntitlementChain(
            environment: "Production", originalTransactionID: id, productID: product, status: status, autoRenewEnabled: autoRenew,
            expiresAt: expires.map { now + $0 }, graceExpiresAt: grace.map { now + $0 })
    }

    static func grant(
        _ id: Int64, _ entitlement: String = "pro", from start: TimeInterval = -day, to end: TimeInterval = 7 * day,
        revoked: TimeInterval? = nil
    ) -> PromotionalGrant {
        PromotionalGrant(
            grantID: id, userID: "u1", entitlement: entitlement, environment: "Production", startsAt: now + start,
            expiresAt: now + end, reason: "goodwill", grantedBy: "ops", createdAt: now + start, revokedAt: revoked.map { now + $0 })
    }

    static func items(_ chains: [EntitlementChain], _ grants: [PromotionalGrant] = [], at instant: Date = now) -> [EntitlementItem] {
        Entitlements.items(chains: chains, grants: grants, entitlementsOf: { unlocks[$0] ?? [] }, now: instant)
    }

    @Test func aChainGivesWhatItsProductUnlocksWhileItServes() {
        let items = Self.items([Self.chain("1", .active, product: "pro.year")])
        #expect(items.map(\.entitlement) == ["export", "pro"])
        #expect(items.allSatisfy { $0.active && $0.source == .apple && $0.status == .active && $0.willRenew })
        #expect(items[0].originalTransactionID == "1" && items[0].expiresAt == Self.now + Self.day)
        let grace = Self.items([Self.chain("1", .grace, grace: 3 * Self.day)])
        #expect(grace.map(\.active) == [true] && grace[0].gracePeriodExpiresAt == Self.now + 3 * Self.day)
        for lapsed in [SubscriptionStatus.billingRetry, .expired, .revoked] {
            let items = Self.items([Self.chain("1", lapsed)])
            #expect(items.map(\.active) == [false], "\(lapsed)")
            #expect(items[0].status == lapsed && items[0].source == .apple && !items[0].willRenew)
        }
        // A product the catalogue does not know unlocks nothing.
        #expect(Self.items([Self.chain("1", .active, product: "gone")]).isEmpty)
    }

    @Test func theChainWithServiceRepresentsThenTheLatestExpiry() {
        let expiredLater = Self.chain("1", .expired, expires: 30 * Self.day)
        let activeSooner = Self.chain("2", .active, expires: Self.day)
        let activeLater = Self.chain("3", .active, expires: 10 * Self.day)
        for order in [[expiredLater, activeSooner, activeLater], [activeLater, activeSooner, expiredLater]] {
            #expect(Self.items(order).map(\.originalTransactionID) == ["3"])
        }
        #expect(Self.items([expiredLater, activeSooner]).map(\.originalTransactionID) == ["2"])
        // With none serving, the latest lapsed chain says why.
        #expect(Self.items([Self.chain("4", .expired, expires: -5 * Self.day), expiredLater]).map(\.originalTransactionID) == ["1"])
    }

    @Test func aPromotionalGrantGivesAccessWhileInForce() {
        let items = Self.items([], [Self.grant(7)])
        #expect(items.count == 1)
        #expect(items[0].active && items[0].source == .promotional && items[0].expiresAt == Self.now + 7 * Self.day)
        #expect(items[0].status == nil && items[0].productID == nil && !items[0].willRenew)
        // Not yet started, expired, revoked: inactive, still listed (the user had it).
        for grant in [Self.grant(1, from: Self.day, to: 2 * Self.day), Self.grant(2, to: -1), Self.grant(3, revoked: -60)] {
            let items = Self.items([], [grant])
            #expect(items.map(\.active) == [false], "\(grant)")
            #expect(items[0].expiresAt == grant.endsAt)
        }
        // At its expiry exactly, a grant no longer gives access.
        #expect(Self.items([], [Self.grant(4, to: 0)]).map(\.active) == [false])
        #expect(Self.items([], [Self.grant(4, to: 1)]).map(\.active) == [true])
    }

    @Test func anAppleChainWithServiceWinsAndNamesTheGrantsEnd() {
        let both = Self.items([Self.chain("1", .active)], [Self.grant(1, to: 3 * Self.day), Self.grant(2, to: 9 * Self.day)])
        #expect(both.count == 1)
        #expect(both[0].source == .apple && both[0].active && both[0].promotionalExpiresAt == Self.now + 9 * Self.day)
        // A lapsed chain with a grant in force: the grant gives it.
        let lapsed = Self.items([Self.chain("1", .expired, expires: -Self.day)], [Self.grant(1)])
        #expect(lapsed.map(\.source) == [.promotional] && lapsed.map(\.active) == [true])
        // A lapsed chain and a grant that ended: the chain says why.
        let neither = Self.items([Self.chain("1", .expired, expires: -Self.day)], [Self.grant(1, to: -60)])
        #expect(neither.map(\.source) == [.apple] && neither.map(\.active) == [false] && neither[0].promotionalExpiresAt == nil)
    }

    @Test func itemsAreOnePerEntitlementSortedAndIndependentOfTheInstantOnlyThroughInputs() {
        let chains = [Self.chain("1", .active, product: "pro.year"), Self.chain("2", .active, product: "starter.month")]
        let items = Self.items(chains, [Self.grant(1, "beta")])
        #expect(items.map(\.entitlement) == ["beta", "export", "pro", "starter"])
        // A grant read later than its expiry is no longer in force, whatever the row says.
        #expect(Self.items([], [Self.grant(1)], at: Self.now + 8 * Self.day).map(\.active) == [false])
    }

    @Test func identifiers() {
        for good in ["pro", "a", "pro.export", "tier_2-beta", String(repeating: "x", count: 64)] {
            #expect(Entitlements.isIdentifier(good), "\(good)")
        }
        for bad in ["", "Pro", "pro plan", "pro/x", "é", String(repeating: "x", count: 65)] {
            #expect(!Entitlements.isIdentifier(bad), "\(bad)")
        }
    }

    @Test func durations() {
        let start = Date(timeIntervalSince1970: 1_801_958_400)  // 2027-02-01T00:00:00Z
        #expect(Entitlements.end(of: "P7D", from: start) == start + 7 * Self.day)
        #expect(Entitlements.end(of: "P2W", from: start) == start + 14 * Self.day)
        #expect(Entitlements.end(of: "PT12H", from: start) == start + 12 * 3600)
        #expect(Entitlements.end(of: "P1DT1H30M", from: start) == start + Self.day + 5400)
        // Calendar months: February 2027 has 28 days.
        #expect(Entitlements.end(of: "P1M", from: start) == start + 28 * Self.day)
        #expect(Entitlements.end(of: "P1Y", from: start) == start + 365 * Self.day)
        for bad in ["", "P", "7D", "PT", "P1H", "PT1D", "P-1D", "P0D", "P1.5D", "p7d", "P7DT", "P1234567D"] {
            #expect(Entitlements.end(of: bad, from: start) == nil, "\(bad)")
        }
    }

    /// A product decoded without `entitlements` (a snapshot from before them) unlocks its plan
    /// code; one with them keeps them through a round trip.
    @Test func productsDecodedWithoutEntitlementsUnlockTheirPlanCode() throws {
        let product = CatalogueProduct(
            productID: "p", subscriptionGroupID: "g", planCode: "pro", planLevel: 1, duration: .month, creditsAmount: 5,
            entitlements: ["pro", "export"])
        let encoded = try JSONEncoder().encode(product)
        #expect(try JSONDecoder().decode(CatalogueProduct.self, from: encoded) == product)
        var object = try #require(try JSONSerialization.jsonObject(with: encoded) as? [String: Any])
        object["entitlements"] = nil
        let old = try JSONDecoder().decode(CatalogueProduct.self, from: try JSONSerialization.data(withJSONObject: object))
        #expect(old.entitlements == ["pro"])
    }

    @Test func theSummaryPutsAccessInWords() {
        let expires = Date(timeIntervalSince1970: 1_799_107_200)  // 2027-01-05T00:00:00Z
        let item = EntitlementItem(
            entitlement: "pro", active: true, source: .apple, status: .active, expiresAt: expires, willRenew: true)
        #expect(Entitlements.summary([item]) == "pro until 2027-01-05, renews")
        var promotional = EntitlementItem(entitlement: "beta", active: true, source: .promotional, expiresAt: expires)
        #expect(Entitlements.summary([promotional, item]) == "beta (promotional) until 2027-01-05; pro until 2027-01-05, renews")
        promotional.active = false
        #expect(Entitlements.summary([promotional]) == "no entitlement")
    }
}
