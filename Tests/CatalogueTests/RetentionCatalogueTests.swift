import Catalogue
import Domain
import Foundation
import Testing

/// `products[].retentionMessages` of the catalogue file: read as written, refused when Apple
/// could not show it.
@Suite struct RetentionCatalogueTests {
    static let message = "7D1F6C2A-1B2C-4D3E-8F40-5A6B7C8D9E0F"

    static func file(_ rules: [[String: Any]], extra: [String: Any] = [:]) -> [String: Any] {
        var product = CatalogueFileTests.product(["offers": [["offerIdentifier": "keep", "audience": "SUBSCRIBED"]]])
        product["retentionMessages"] = rules
        product.merge(extra) { _, new in new }
        return ["appKey": "com.example.subscriptions", "products": [product]]
    }

    @Test func rulesAreReadInOrderWithTheMessageIdLowercased() throws {
        let parsed = try CatalogueFileTests.parse(
            Self.file([
                ["messageIdentifier": Self.message, "locales": ["de", "en-GB"], "offerIdentifier": "keep"],
                ["messageIdentifier": Self.message],
            ]))
        #expect(
            parsed.products[0].retentionMessages == [
                RetentionRule(messageIdentifier: Self.message.lowercased(), locales: ["de", "en-GB"], offerIdentifier: "keep"),
                RetentionRule(messageIdentifier: Self.message.lowercased()),
            ])
        #expect(try CatalogueFileTests.parse(Self.file([])).products[0].retentionMessages.isEmpty)
    }

    @Test func rulesAppleCouldNotShowAreRefused() {
        let problems = CatalogueFileTests.problems(
            Self.file([
                ["messageIdentifier": "welcome-back"],
                ["messageIdentifier": Self.message, "locales": []],
                ["messageIdentifier": Self.message, "locales": ["en US"]],
                ["messageIdentifier": Self.message, "offerIdentifier": "missing"],
                ["messageIdentifier": Self.message, "image": "x"],
            ]))
        #expect(
            problems == [
                "products[0].retentionMessages[4].image is not a catalogue field",
                "products[0].retentionMessages[0].messageIdentifier must be the message's UUID from App Store Connect",
                "products[0].retentionMessages[1].locales must name at least one locale (or be left out: any)",
                "products[0].retentionMessages[2].locales[0] \"en US\" is not a locale (en, en-US)",
                "products[0].retentionMessages[3].offerIdentifier missing is not one of the product's offers",
            ])
    }

    @Test func aCreditPackHasNoRetentionMessages() {
        let problems = CatalogueFileTests.problems([
            "appKey": "com.example.subscriptions",
            "products": [
                [
                    "productId": "credits.100", "kind": "CONSUMABLE", "planCode": "pack", "permanentCredits": 100,
                    "retentionMessages": [["messageIdentifier": Self.message]],
                ]
            ],
        ])
        #expect(problems.contains("products[0].retentionMessages is a subscription field; a CONSUMABLE has permanentCredits only"))
    }

    /// The monthly starter plan (group 21000000) and, beside it, `others`.
    static func catalogue(rule: [String: Any], others: [[String: Any]]) -> [String: Any] {
        var product = CatalogueFileTests.product(["offers": [["offerIdentifier": "keep", "audience": "SUBSCRIBED"]]])
        product["retentionMessages"] = [rule]
        return ["appKey": "com.example.subscriptions", "products": [product] + others]
    }

    static var yearly: [String: Any] { CatalogueFileTests.product(["productId": "com.example.starter.yearly", "duration": "P1Y"]) }

    @Test func anAlternateProductOfTheSameGroupIsRead() throws {
        let parsed = try CatalogueFileTests.parse(
            Self.catalogue(
                rule: ["messageIdentifier": Self.message, "alternateProductId": "com.example.starter.yearly"], others: [Self.yearly]))
        #expect(
            parsed.products[0].retentionMessages == [
                RetentionRule(messageIdentifier: Self.message.lowercased(), alternateProductId: "com.example.starter.yearly")
            ])
    }

    @Test func anAlternateProductOutsideTheGroupOrTheCatalogueIsRefused() {
        let otherGroup = CatalogueFileTests.product(["productId": "com.example.other", "subscriptionGroupId": "22000000"])
        let pack: [String: Any] = ["productId": "credits.100", "kind": "CONSUMABLE", "planCode": "pack", "permanentCredits": 100]
        let cases: [(rule: [String: Any], expected: String)] = [
            (
                ["messageIdentifier": Self.message, "alternateProductId": "com.example.unknown"],
                "products[0].retentionMessages[0].alternateProductId com.example.unknown is not a product of this catalogue"
            ),
            (
                ["messageIdentifier": Self.message, "alternateProductId": "com.example.other"],
                "products[0].retentionMessages[0].alternateProductId com.example.other is not in the subscription group 21000000;"
                    + " Apple switches only within a group"
            ),
            (
                ["messageIdentifier": Self.message, "alternateProductId": "credits.100"],
                "products[0].retentionMessages[0].alternateProductId credits.100 is not in the subscription group 21000000;"
                    + " Apple switches only within a group"
            ),
            (
                ["messageIdentifier": Self.message, "alternateProductId": "com.example.starter.monthly"],
                "products[0].retentionMessages[0].alternateProductId com.example.starter.monthly is the product itself;"
                    + " name another product of its subscription group"
            ),
        ]
        let disabled = CatalogueFileTests.product(["productId": "com.example.starter.weekly", "duration": "P1W", "enabled": false])
        #expect(
            CatalogueFileTests.problems(
                Self.catalogue(rule: ["messageIdentifier": Self.message, "alternateProductId": "com.example.starter.weekly"], others: [disabled]))
                == [
                    "products[0].retentionMessages[0].alternateProductId com.example.starter.weekly is disabled; a product that is not offered cannot be suggested"
                ])
        for (rule, expected) in cases {
            #expect(CatalogueFileTests.problems(Self.catalogue(rule: rule, others: [Self.yearly, otherGroup, pack])) == [expected])
        }
        let both = CatalogueFileTests.problems(
            Self.catalogue(
                rule: ["messageIdentifier": Self.message, "offerIdentifier": "keep", "alternateProductId": "com.example.starter.yearly"],
                others: [Self.yearly]))
        #expect(
            both == [
                "products[0].retentionMessages[0] names both an offerIdentifier and an alternateProductId; Apple's answer is one or the other"
            ])
    }
}
