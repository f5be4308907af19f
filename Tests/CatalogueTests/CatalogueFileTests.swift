import Catalogue
import Domain
import Foundation
import TestSupport
import Testing

/// The catalogue file format: the shipped demo file, defaults, and every refusal.
@Suite struct CatalogueFileTests {
    static func product(_ fields: [String: Any] = [:], removing: [String] = []) -> [String: Any] {
        var product: [String: Any] = [
            "productId": "com.example.starter.monthly", "subscriptionGroupId": "21000000", "planCode": "starter",
            "planLevel": 2, "duration": "MONTH", "creditsAmount": 1000,
        ]
        product.merge(fields) { _, new in new }
        for key in removing { product.removeValue(forKey: key) }
        return product
    }

    static func parse(_ object: [String: Any]) throws(CatalogueFileError) -> CatalogueFile {
        try CatalogueFile.parse(try! JSONSerialization.data(withJSONObject: object))
    }

    static func problems(_ object: [String: Any]) -> [String] {
        do {
            _ = try parse(object)
            return []
        } catch {
            return error.problems
        }
    }

    @Test func demoCatalogueIsDomainMdTable() throws {
        let path = ServiceProcess.packageRoot.appendingPathComponent("deploy/local/catalog.json").path
        let file = try CatalogueFile.load(path: path)
        #expect(file.channel == "APPLE")
        #expect(file.appKey == "com.example.subscriptions")
        let byID = Dictionary(uniqueKeysWithValues: file.products.map { ($0.productID, $0) })
        let starter = try #require(byID["com.example.starter.monthly"])
        let proMonthly = try #require(byID["com.example.pro.monthly"])
        let proYearly = try #require(byID["com.example.pro.yearly"])
        #expect(file.products.count == 3)
        #expect(Set(file.products.map(\.subscriptionGroupID)).count == 1)
        #expect((starter.planCode, starter.duration, starter.creditsAmount) == ("starter", .month, 1000))
        #expect((proMonthly.planCode, proMonthly.duration, proMonthly.creditsAmount) == ("pro", .month, 3000))
        #expect((proYearly.planCode, proYearly.duration, proYearly.creditsAmount) == ("pro", .year, 3000))
        // Apple's levels: 1 is the highest, so pro is above starter and the two pro periods share a level.
        #expect(proMonthly.planLevel < starter.planLevel)
        #expect(proMonthly.planLevel == proYearly.planLevel)
        #expect(PlanRelation.between(current: starter, candidate: proYearly) == .upgrade)
        #expect(PlanRelation.between(current: proYearly, candidate: proMonthly) == .crossgrade)
    }

    @Test func optionalRulesTakeTheDatabaseDefaults() throws {
        let file = try Self.parse(["appKey": "com.example.app", "products": [Self.product()]])
        let product = try #require(file.products.first)
        #expect(file.channel == "APPLE")
        #expect(product.enabled)
        #expect(product.trialGrantsCredits)
        #expect(product.upgradeGrant == .full)
        #expect(!product.familySharedGrantsCredits)
        let explicit = try Self.parse([
            "appKey": "com.example.app",
            "products": [
                Self.product([
                    "enabled": false, "trialGrantsCredits": false, "upgradeGrant": "DIFFERENCE", "familySharedGrantsCredits": true,
                ])
            ],
        ])
        let rules = try #require(explicit.products.first)
        #expect(!rules.enabled && !rules.trialGrantsCredits && rules.upgradeGrant == .difference && rules.familySharedGrantsCredits)
    }

    @Test func durationsAreAppStoreConnectsAndTheOldSpellingsMeanP1MAndP1Y() throws {
        let values = ["P1W", "P1M", "P2M", "P3M", "P6M", "P1Y", "MONTH", "YEAR"]
        let file = try Self.parse([
            "appKey": "com.example.app",
            "products": values.map { Self.product(["productId": "p.\($0)", "duration": $0]) },
        ])
        #expect(file.products.map(\.duration) == [.week, .month, .twoMonths, .threeMonths, .sixMonths, .year, .month, .year])
        #expect(
            Self.problems(["appKey": "a", "products": [Self.product(["duration": "P4M"])]]).first?.hasPrefix(
                "products[0].duration has an invalid value (duration: P1W|P1M|P2M|P3M|P6M|P1Y") == true)
    }

    @Test func freePeriodRulesPerOfferKind() throws {
        let file = try Self.parse([
            "appKey": "com.example.app",
            "products": [Self.product(["freePeriodGrantsCredits": ["OFFER_CODE": false, "WIN_BACK": true, "PROMOTIONAL": false]])],
        ])
        #expect(file.products.first?.freePeriodGrantsCredits == [.offerCode: false, .winBack: true, .promotional: false])
        #expect(try Self.parse(["appKey": "a", "products": [Self.product()]]).products.first?.freePeriodGrantsCredits == [:])
        let problems = Self.problems([
            "appKey": "a", "products": [Self.product(["freePeriodGrantsCredits": ["INTRODUCTORY": false, "REFERRAL": true]])],
        ])
        #expect(problems.count == 2)
        #expect(problems.allSatisfy { $0.contains("is not an offer kind") })
        #expect(Self.problems(["appKey": "a", "products": [Self.product(["freePeriodGrantsCredits": ["OFFER_CODE": 1]])]]).count == 1)
    }

    @Test func refundPreferenceIsApplesOrAbsent() throws {
        let file = try Self.parse(["appKey": "a", "products": [Self.product(["refundPreference": "GRANT_PRORATED"])]])
        #expect(file.products.first?.refundPreference == .grantProrated)
        #expect(try Self.parse(["appKey": "a", "products": [Self.product()]]).products.first?.refundPreference == nil)
        #expect(
            Self.problems(["appKey": "a", "products": [Self.product(["refundPreference": "GRANT"])]]).first?.hasPrefix(
                "products[0].refundPreference has an invalid value") == true)
    }

    /// What a product unlocks: the entitlements it names, else its plan code; identifiers checked
    /// one by one, a consumable names none.
    @Test func entitlementsAreNamedOrThePlanCode() throws {
        let named = try Self.parse(["appKey": "a", "products": [Self.product(["entitlements": ["pro", "pro.export", "tier_2-b"]])]])
        #expect(named.products.first?.entitlements == ["pro", "pro.export", "tier_2-b"])
        #expect(try Self.parse(["appKey": "a", "products": [Self.product()]]).products.first?.entitlements == ["starter"])
        let cases: [(Any, String)] = [
            (["Pro"], #"products[0].entitlements[0] "Pro" is not an entitlement identifier"#),
            (["pro", "pro plan"], #"products[0].entitlements[1] "pro plan" is not an entitlement identifier"#),
            ([String(repeating: "x", count: 65)], "products[0].entitlements[0] "),
            ([String](), "products[0].entitlements must name at least one entitlement"),
            (["pro", "pro"], "products[0].entitlements lists an entitlement twice"),
            ("pro", "products[0].entitlements has the wrong type"),
        ]
        for (value, expected) in cases {
            let problems = Self.problems(["appKey": "a", "products": [Self.product(["entitlements": value])]])
            #expect(problems.contains { $0.hasPrefix(expected) }, "\(value): \(problems)")
        }
        let pack: [String: Any] = [
            "productId": "c.100", "kind": "CONSUMABLE", "planCode": "pack", "permanentCredits": 100, "entitlements": ["pro"],
        ]
        #expect(Self.problems(["appKey": "a", "products": [pack]]).contains { $0.hasPrefix("products[0].entitlements is a subscription field") })
    }

    @Test func offersNameTheirAudienceAndTheIntroductoryOfferIsAFlag() throws {
        let offers: [[String: Any]] = [
            ["offerIdentifier": "winback50", "audience": "LAPSED"], ["offerIdentifier": "loyal", "audience": "SUBSCRIBED"],
        ]
        let parsed = try Self.parse(["appKey": "a", "products": [Self.product(["offers": offers, "introductoryOffer": true])]])
        #expect(
            parsed.products.first?.offers == [
                CatalogueOffer(offerIdentifier: "winback50", audience: .lapsed), CatalogueOffer(offerIdentifier: "loyal", audience: .subscribed),
            ])
        #expect(parsed.products.first?.introductoryOffer == true)
        let plain = try Self.parse(["appKey": "a", "products": [Self.product()]]).products.first
        #expect(plain?.offers == [] && plain?.introductoryOffer == false)
        let cases: [(Any, String)] = [
            (
                [["offerIdentifier": "a", "audience": "LAPSED"], ["offerIdentifier": "a", "audience": "ANYONE"]],
                "products[0].offers[1].offerIdentifier a is listed twice"
            ),
            ([["offerIdentifier": "a b", "audience": "LAPSED"]], "products[0].offers[0].offerIdentifier must be 1 to 255 characters"),
            ([["offerIdentifier": "a", "audience": "EVERYONE"]], "products[0].offers[0].audience has an invalid value"),
            ([["offerIdentifier": "a", "audience": "LAPSED", "discount": 5]], "products[0].offers[0].discount is not a catalogue field"),
            ([["audience": "LAPSED"]], "products[0].offers[0].offerIdentifier is required"),
        ]
        for (value, expected) in cases {
            let problems = Self.problems(["appKey": "a", "products": [Self.product(["offers": value])]])
            #expect(problems.contains { $0.hasPrefix(expected) }, "\(value): \(problems)")
        }
        let pack: [String: Any] = [
            "productId": "c.100", "kind": "CONSUMABLE", "planCode": "pack", "permanentCredits": 100, "introductoryOffer": true,
        ]
        #expect(
            Self.problems(["appKey": "a", "products": [pack]]).contains { $0.hasPrefix("products[0].introductoryOffer is a subscription field") })
    }

    /// Each case: fields (JSON) merged into a valid product, and the start of the expected problem.
    @Test(arguments: [
        (#"{"creditAmount": 5}"#, "products[0].creditAmount is not a catalogue field"),
        (#"{"planLevel": true}"#, "products[0].planLevel has the wrong type"),
        (#"{"creditsAmount": "1000"}"#, "products[0].creditsAmount has the wrong type"),
        (#"{"duration": "WEEK"}"#, "products[0].duration has an invalid value"),
        (#"{"upgradeGrant": "HALF"}"#, "products[0].upgradeGrant has an invalid value"),
        (#"{"planLevel": 0}"#, "products[0].planLevel must be from 1"),
        (#"{"creditsAmount": -1}"#, "products[0].creditsAmount must be from 0"),
        (#"{"creditsAmount": 1000000000001}"#, "products[0].creditsAmount must be from 0"),
        (#"{"productId": ""}"#, "products[0].productId must be 1 to 255 characters"),
        (#"{"planCode": "pro plan"}"#, "products[0].planCode must be 1 to 255 characters"),
    ])
    func refusesABadProduct(fields: String, expected: String) throws {
        let merge = try #require(try JSONSerialization.jsonObject(with: Data(fields.utf8)) as? [String: Any])
        let problems = Self.problems(["appKey": "com.example.app", "products": [Self.product(merge)]])
        #expect(problems.contains { $0.hasPrefix(expected) }, "\(problems)")
    }

    /// A credit pack: `kind` CONSUMABLE with its permanent credits and none of a subscription's
    /// fields; a subscription keeps requiring its own.
    @Test func consumablesCarryPermanentCreditsOnly() throws {
        let pack: [String: Any] = [
            "productId": "com.example.credits.100", "kind": "CONSUMABLE", "planCode": "pack100", "permanentCredits": 100,
            "refundPreference": "GRANT_PRORATED",
        ]
        let file = try Self.parse(["appKey": "a.b", "products": [pack, Self.product()]])
        #expect(
            file.products[0]
                == .consumable(productID: "com.example.credits.100", planCode: "pack100", permanentCredits: 100, refundPreference: .grantProrated))
        #expect(file.products[1].kind == .autoRenewable && file.products[1].permanentCredits == 0)
        var withGroup = pack
        withGroup["subscriptionGroupId"] = "21000000"
        #expect(
            Self.problems(["appKey": "a.b", "products": [withGroup]])
                == ["products[0].subscriptionGroupId is a subscription field; a CONSUMABLE has permanentCredits only"])
        var empty = pack
        empty["permanentCredits"] = 0
        #expect(
            Self.problems(["appKey": "a.b", "products": [empty]])
                == ["products[0].permanentCredits must be from 1 to 1000000000000 whole credits for a CONSUMABLE"])
        #expect(
            Self.problems(["appKey": "a.b", "products": [Self.product(["permanentCredits": 5])]])
                == ["products[0].permanentCredits is for a CONSUMABLE only (kind)"])
        #expect(Self.problems(["appKey": "a.b", "products": [Self.product(removing: ["duration"])]]) == ["products[0].duration is required"])
        #expect(Self.problems(["appKey": "a.b", "products": [Self.product(["kind": "NON_CONSUMABLE"])]]).count == 1)
    }

    @Test func refusesMissingFieldsDuplicatesAndBadTopLevel() {
        #expect(Self.problems(["appKey": "a.b", "products": [Self.product(removing: ["planCode"])]]) == ["products[0].planCode is required"])
        #expect(Self.problems(["products": [Self.product()]]) == ["appKey is required"])
        #expect(Self.problems(["appKey": "a.b", "products": []]) == ["products must list at least one product"])
        #expect(Self.problems(["appKey": "a.b", "channel": "GOOGLE", "products": [Self.product()]]) == ["channel must be APPLE"])
        #expect(Self.problems(["appKey": "a.b", "products": [Self.product()], "extra": 1]) == ["extra is not a catalogue field"])
        // Several problems are all reported at once.
        let problems = Self.problems([
            "appKey": "a.b", "products": [Self.product(), Self.product(["planLevel": 0, "creditsAmount": -5])],
        ])
        #expect(problems.count == 3, "\(problems)")
        #expect(problems.contains("products[1].productId com.example.starter.monthly is listed twice"))
        #expect(throws: CatalogueFileError.self) { try CatalogueFile.parse(Data("[1, 2]".utf8)) }
        #expect(throws: CatalogueFileError.self) { try CatalogueFile.load(path: "/nonexistent/catalog.json") }
    }

    /// `billingPlanType`: MONTHLY is a yearly commitment billed month by month, so only a `P1Y`
    /// subscription may state it; left out, a product is billed up front.
    @Test func billingPlanTypeIsAYearlyCommitmentBilledMonthly() throws {
        let file = try Self.parse([
            "appKey": "com.example.app",
            "products": [
                Self.product(),
                Self.product(["productId": "com.example.pro.commitment", "duration": "P1Y", "billingPlanType": "MONTHLY"]),
                Self.product(["productId": "com.example.pro.yearly", "duration": "P1Y", "billingPlanType": "BILLED_UPFRONT"]),
            ],
        ])
        #expect(file.products.map(\.billingPlan) == [.billedUpfront, .monthly, .billedUpfront])
        #expect(
            Self.problems(["appKey": "a", "products": [Self.product(["billingPlanType": "MONTHLY"])]]) == [
                "products[0].billingPlanType MONTHLY is a 12-month commitment billed monthly: the duration must be P1Y"
            ])
        #expect(
            Self.problems(["appKey": "a", "products": [Self.product(["duration": "P1Y", "billingPlanType": "WEEKLY"])]]).first?
                .hasPrefix("products[0].billingPlanType has an invalid value") == true)
        #expect(
            Self.problems([
                "appKey": "a",
                "products": [
                    [
                        "productId": "c.100", "kind": "CONSUMABLE", "planCode": "pack", "permanentCredits": 100,
                        "billingPlanType": "MONTHLY",
                    ]
                ],
            ]) == ["products[0].billingPlanType is a subscription field; a CONSUMABLE has permanentCredits only"])
    }
}
