import Catalogue
import Domain
import Foundation
import Postgres
import TestSupport
import Testing

extension TestDatabase {
    func versions() async throws -> [String: Int] {
        var versions: [String: Int] = [:]
        for row in try await pool.query("SELECT product_id, version FROM payment_product") {
            versions[try row.decode("product_id")] = try row.decode("version")
        }
        return versions
    }
}

/// Applying catalogue files to the real PostgreSQL: upsert, versions, audit trail, concurrency.
@Suite(.timeLimit(.minutes(2)))
struct CatalogueStoreTests {
    static let demo: CatalogueFile = {
        try! CatalogueFile.load(path: ServiceProcess.packageRoot.appendingPathComponent("deploy/local/catalog.json").path)
    }()

    @Test func applyIsIdempotentAndAuditsEveryChange() async throws {
        try await withTestDatabase("catalogue") { database in
            let store = CatalogueStore(pool: database.pool)
            let productIDs = Self.demo.products.map(\.productID)

            let first = try await store.apply(Self.demo, operator: "test", reason: "seed")
            #expect(first == CatalogueApplyResult(inserted: productIDs))
            #expect(
                try await store.products(appKey: Self.demo.appKey).sorted { $0.productID < $1.productID }
                    == Self.demo.products.sorted { $0.productID < $1.productID })
            #expect(try await database.versions() == Dictionary(uniqueKeysWithValues: productIDs.map { ($0, 1) }))
            #expect(
                try await database.count(
                    "SELECT count(*) FROM audit_log WHERE action = 'CATALOGUE_PRODUCT_CREATED' AND before IS NULL AND operator = 'test' AND reason = 'seed'"
                ) == 3)

            // The same file again: nothing written, not even an audit row.
            let again = try await store.apply(Self.demo, operator: "test", reason: "again")
            #expect(again == CatalogueApplyResult(unchanged: productIDs))
            #expect(try await database.versions() == Dictionary(uniqueKeysWithValues: productIDs.map { ($0, 1) }))
            #expect(try await database.count("SELECT count(*) FROM audit_log") == 3)

            // One rule changed: that product alone gets version 2 and an audit row with before and after.
            var changed = Self.demo
            let index = try #require(changed.products.firstIndex { $0.productID == "com.example.pro.monthly" })
            changed.products[index].creditsAmount = 3500
            changed.products[index].upgradeGrant = .difference
            let third = try await store.apply(changed, operator: "alice", reason: "pricing change")
            #expect(third.updated == ["com.example.pro.monthly"])
            #expect(third.unchanged.count == 2)
            var expected = Dictionary(uniqueKeysWithValues: productIDs.map { ($0, 1) })
            expected["com.example.pro.monthly"] = 2
            #expect(try await database.versions() == expected)
            let audit = try await database.pool.query(
                """
                SELECT operator, reason, (before->>'creditsAmount')::bigint AS before_amount, (after->>'creditsAmount')::bigint AS after_amount,
                    before->>'upgradeGrant' AS before_grant, after->>'upgradeGrant' AS after_grant,
                    (before->>'version')::int AS before_version, (after->>'version')::int AS after_version, after->>'appKey' AS app_key
                FROM audit_log WHERE action = 'CATALOGUE_PRODUCT_UPDATED'
                """)
            #expect(audit.count == 1)
            let row = try #require(audit.first)
            #expect(try row.decode("operator", as: String.self) == "alice")
            #expect(try row.decode("reason", as: String.self) == "pricing change")
            #expect(try row.decode("before_amount", as: Int64.self) == 3000)
            #expect(try row.decode("after_amount", as: Int64.self) == 3500)
            #expect(try row.decode("before_grant", as: String.self) == "FULL")
            #expect(try row.decode("after_grant", as: String.self) == "DIFFERENCE")
            #expect(try row.decode("before_version", as: Int.self) == 1)
            #expect(try row.decode("after_version", as: Int.self) == 2)
            #expect(try row.decode("app_key", as: String.self) == Self.demo.appKey)
        }
    }

    /// Every duration and the per-offer-kind rules survive the round trip; the same file again
    /// changes nothing, and the audit trail names the rules as the file does.
    @Test func durationsAndOfferRulesRoundTrip() async throws {
        try await withTestDatabase("catalogue") { database in
            let store = CatalogueStore(pool: database.pool)
            var file = Self.demo
            file.products = ProductDuration.allCases.enumerated().map { index, duration in
                CatalogueProduct(
                    productID: "p.\(duration.rawValue)", subscriptionGroupID: "g", planCode: "plan", planLevel: 1, duration: duration,
                    creditsAmount: 100, freePeriodGrantsCredits: index == 0 ? [.offerCode: false, .winBack: true] : [:],
                    billingRetrySpendsCredits: index == 1, refundPreference: index == 2 ? .decline : nil)
            }
            #expect(try await store.apply(file, operator: "test", reason: "seed").inserted.count == 6)
            let read = try await store.products(appKey: file.appKey)
            #expect(read.map(\.duration) == ProductDuration.allCases, "listed from the shortest period")
            #expect(Set(read) == Set(file.products))
            #expect(try await store.apply(file, operator: "test", reason: "again").unchanged.count == 6)
            let audited: Bool = try await database.pool.query(
                """
                SELECT after->'freePeriodGrantsCredits' = '{"OFFER_CODE": false, "WIN_BACK": true}'::jsonb AS same
                  FROM audit_log WHERE after->>'productId' = 'p.P1W' ORDER BY id LIMIT 1
                """)[0].decode("same")
            #expect(audited)
        }
    }

    /// Entitlements are stored and read back; changing them is an update; a row written without
    /// them (before migration 0033, or by hand) unlocks its plan code.
    @Test func entitlementsRoundTrip() async throws {
        try await withTestDatabase("catalogue") { database in
            let store = CatalogueStore(pool: database.pool)
            var file = Self.demo
            file.products = [
                CatalogueProduct(
                    productID: "p.named", subscriptionGroupID: "g", planCode: "pro", planLevel: 1, duration: .month, creditsAmount: 1,
                    entitlements: ["pro", "export"]),
                CatalogueProduct(
                    productID: "p.default", subscriptionGroupID: "g", planCode: "starter", planLevel: 2, duration: .month, creditsAmount: 1),
            ]
            try await store.apply(file, operator: "test", reason: "seed")
            let read = Dictionary(uniqueKeysWithValues: try await store.products(appKey: file.appKey).map { ($0.productID, $0) })
            #expect(read["p.named"]?.entitlements == ["pro", "export"])
            #expect(read["p.default"]?.entitlements == ["starter"])
            file.products[0].entitlements = ["pro"]
            #expect(try await store.apply(file, operator: "test", reason: "narrow").updated == ["p.named"])
            #expect(try await store.products(appKey: file.appKey).first { $0.productID == "p.named" }?.entitlements == ["pro"])
            try await database.pool.query("UPDATE payment_product SET entitlements = NULL WHERE product_id = 'p.default'")
            #expect(try await store.products(appKey: file.appKey).first { $0.productID == "p.default" }?.entitlements == ["starter"])
            #expect(try await store.apply(file, operator: "test", reason: "again").unchanged.count == 2)
        }
    }

    @Test func offersRoundTrip() async throws {
        try await withTestDatabase("catalogue") { database in
            let store = CatalogueStore(pool: database.pool)
            var file = Self.demo
            #expect(try await store.apply(file, operator: "test", reason: "seed").inserted.count == file.products.count)
            #expect(try await store.products(appKey: file.appKey).allSatisfy { $0.offers.isEmpty && !$0.introductoryOffer })
            file.products[0].offers = [CatalogueOffer(offerIdentifier: "winback50", audience: .lapsed)]
            file.products[0].introductoryOffer = true
            #expect(try await store.apply(file, operator: "test", reason: "offers").updated == [file.products[0].productID])
            let read = try #require(try await store.products(appKey: file.appKey).first { $0.productID == file.products[0].productID })
            #expect(read.offers == [CatalogueOffer(offerIdentifier: "winback50", audience: .lapsed)] && read.introductoryOffer)
            #expect(try await store.apply(file, operator: "test", reason: "again").updated.isEmpty)
        }
    }

    /// The plan type is stored, read back and versioned like any rule of the product.
    @Test func billingPlanTypeRoundTrips() async throws {
        try await withTestDatabase("catalogue") { database in
            let store = CatalogueStore(pool: database.pool)
            var file = Self.demo
            try await store.apply(file, operator: "test", reason: "seed")
            #expect(try await store.products(appKey: file.appKey).allSatisfy { $0.billingPlan == .billedUpfront })
            let index = try #require(file.products.firstIndex { $0.duration == .year })
            file.products[index].billingPlan = .monthly
            #expect(try await store.apply(file, operator: "test", reason: "commitment").updated == [file.products[index].productID])
            let read = try #require(try await store.products(appKey: file.appKey).first { $0.productID == file.products[index].productID })
            #expect(read.billingPlan == .monthly)
            #expect(try await store.apply(file, operator: "test", reason: "again").updated.isEmpty)
        }
    }

    @Test func disabledProductsStayKnownAndDeletedOnesComeBack() async throws {
        try await withTestDatabase("catalogue") { database in
            let store = CatalogueStore(pool: database.pool)
            try await store.apply(Self.demo, operator: "test", reason: "seed")
            var withdrawn = Self.demo
            withdrawn.products[0].enabled = false
            #expect(try await store.apply(withdrawn, operator: "test", reason: "withdraw").updated == [withdrawn.products[0].productID])
            let read = try await store.products(appKey: Self.demo.appKey)
            #expect(read.count == 3)
            #expect(read.first { $0.productID == withdrawn.products[0].productID }?.enabled == false)

            // A deleted row is invisible to readers; applying it again restores it as a change.
            try await database.pool.query("UPDATE payment_product SET deleted = true WHERE product_id = 'com.example.pro.yearly'")
            #expect(try await store.products(appKey: Self.demo.appKey).count == 2)
            let restored = try await store.apply(withdrawn, operator: "test", reason: "restore")
            #expect(restored.updated == ["com.example.pro.yearly"])
            #expect(try await store.products(appKey: Self.demo.appKey).count == 3)
            #expect(try await database.versions()["com.example.pro.yearly"] == 2)
            // Another app's catalogue is separate.
            #expect(try await store.products(appKey: "com.other.app").isEmpty)
        }
    }

    @Test func concurrentAppliesInsertEachProductOnce() async throws {
        try await withTestDatabase("catalogue") { database in
            let store = CatalogueStore(pool: database.pool)
            let results = try await withThrowingTaskGroup(of: CatalogueApplyResult.self) { group in
                for index in 0..<6 { group.addTask { try await store.apply(Self.demo, operator: "test", reason: "run \(index)") } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(results.flatMap(\.inserted).sorted() == Self.demo.products.map(\.productID).sorted())
            #expect(results.flatMap(\.unchanged).count == 5 * 3)
            #expect(try await database.count("SELECT count(*) FROM payment_product") == 3)
            #expect(try await database.count("SELECT count(*) FROM audit_log") == 3)
        }
    }
}
