import Domain
import Foundation
import Postgres
import Storage

/// What applying a catalogue file did, by product id.
public struct CatalogueApplyResult: Sendable, Equatable {
    public var inserted: [String] = []
    public var updated: [String] = []
    public var unchanged: [String] = []

    public init(inserted: [String] = [], updated: [String] = [], unchanged: [String] = []) {
        self.inserted = inserted
        self.updated = updated
        self.unchanged = unchanged
    }
}

/// The catalogue in PostgreSQL (`payment_product`): written from catalogue files, read by the services.
public struct CatalogueStore: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Upserts every product of `file` in one transaction: a new product is inserted, a changed
    /// (or previously deleted) one is updated with its version bumped, an identical one is left
    /// alone; each insert or update writes an `audit_log` row with the before and after states.
    /// Products absent from the file are not touched (disable one with `"enabled": false`).
    @discardableResult
    public func apply(_ file: CatalogueFile, operator operatorName: String, reason: String) async throws -> CatalogueApplyResult {
        try await pool.transaction { connection in
            // Two concurrent applies of the same app would both insert a new product and one would
            // fail on the unique key; queueing them makes the later one find the work done.
            try await connection.query(
                "SELECT pg_advisory_xact_lock(hashtextextended(\("payment_product:\(file.channel):\(file.appKey)"), 0))")
            var existing: [String: StoredProduct] = [:]
            let rows = try await connection.query(
                """
                SELECT product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount, enabled,
                    trial_grants_credits, upgrade_grant, family_shared_grants_credits, promotional_free_grants_credits,
                    offer_code_free_grants_credits, win_back_free_grants_credits, billing_retry_spends_credits, refund_preference, kind, permanent_credits, to_jsonb(coalesce(entitlements, ARRAY[plan_code])) AS entitlements, offers, introductory_offer, billing_plan_type, retention_messages, version, deleted
                FROM payment_product WHERE channel = \(file.channel) AND app_key = \(file.appKey)
                """)
            for row in rows {
                let stored = StoredProduct(product: try Self.product(row), version: try row.decode("version"), deleted: try row.decode("deleted"))
                existing[stored.product.productID] = stored
            }
            var result = CatalogueApplyResult()
            for product in file.products {
                let before = existing[product.productID]
                if let before, !before.deleted, before.product == product {
                    result.unchanged.append(product.productID)
                    continue
                }
                let version: Int
                if before == nil {
                    version = try await connection.query(
                        """
                        INSERT INTO payment_product (channel, app_key, product_id, subscription_group_id, plan_code, plan_level,
                            duration, credits_amount, enabled, trial_grants_credits, upgrade_grant, family_shared_grants_credits,
                            promotional_free_grants_credits, offer_code_free_grants_credits, win_back_free_grants_credits,
                            billing_retry_spends_credits, refund_preference, kind, permanent_credits, entitlements, offers,
                            introductory_offer, billing_plan_type, retention_messages)
                        VALUES (\(file.channel), \(file.appKey), \(product.productID), \(product.subscriptionGroupID), \(product.planCode),
                            \(product.planLevel), \(product.duration.rawValue), \(product.creditsAmount), \(product.enabled),
                            \(product.trialGrantsCredits), \(product.upgradeGrant.rawValue), \(product.familySharedGrantsCredits),
                            \(product.freePeriodGrantsCredits[.promotional]), \(product.freePeriodGrantsCredits[.offerCode]),
                            \(product.freePeriodGrantsCredits[.winBack]), \(product.billingRetrySpendsCredits),
                            \(product.refundPreference?.rawValue), \(product.kind.rawValue), \(product.permanentCredits),
                            \(PostgresArray(product.entitlements))::text[], \(try PostgresJSON(encoding: product.offers)),
                            \(product.introductoryOffer), \(product.billingPlan.rawValue), \(try PostgresJSON(encoding: product.retentionMessages)))
                        RETURNING version
                        """
                    )[0].decode("version")
                    result.inserted.append(product.productID)
                } else {
                    version = try await connection.query(
                        """
                        UPDATE payment_product SET subscription_group_id = \(product.subscriptionGroupID), plan_code = \(product.planCode),
                            plan_level = \(product.planLevel), duration = \(product.duration.rawValue),
                            credits_amount = \(product.creditsAmount), enabled = \(product.enabled),
                            trial_grants_credits = \(product.trialGrantsCredits), upgrade_grant = \(product.upgradeGrant.rawValue),
                            family_shared_grants_credits = \(product.familySharedGrantsCredits),
                            promotional_free_grants_credits = \(product.freePeriodGrantsCredits[.promotional]),
                            offer_code_free_grants_credits = \(product.freePeriodGrantsCredits[.offerCode]),
                            win_back_free_grants_credits = \(product.freePeriodGrantsCredits[.winBack]),
                            billing_retry_spends_credits = \(product.billingRetrySpendsCredits),
                            refund_preference = \(product.refundPreference?.rawValue), kind = \(product.kind.rawValue),
                            permanent_credits = \(product.permanentCredits),
                            entitlements = \(PostgresArray(product.entitlements))::text[],
                            offers = \(try PostgresJSON(encoding: product.offers)), introductory_offer = \(product.introductoryOffer),
                            billing_plan_type = \(product.billingPlan.rawValue),
                            retention_messages = \(try PostgresJSON(encoding: product.retentionMessages)), deleted = false,
                            version = version + 1, updated_at = now()
                        WHERE channel = \(file.channel) AND app_key = \(file.appKey) AND product_id = \(product.productID)
                        RETURNING version
                        """
                    )[0].decode("version")
                    result.updated.append(product.productID)
                }
                let after = StoredProduct(product: product, version: version, deleted: false)
                try await AuditLog(pool: pool).record(
                    on: connection, operator: operatorName,
                    action: before == nil ? "CATALOGUE_PRODUCT_CREATED" : "CATALOGUE_PRODUCT_UPDATED", reason: reason,
                    before: try before.map { try $0.audit(file) }, after: try after.audit(file))
            }
            return result
        }
    }

    /// The products of an app that are not deleted, enabled or not (a disabled product can still
    /// be someone's current plan), ordered by group, level, duration and id.
    public func products(channel: String = CatalogueFile.appleChannel, appKey: String) async throws -> [CatalogueProduct] {
        try await pool.query(
            """
            SELECT product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount, enabled,
                trial_grants_credits, upgrade_grant, family_shared_grants_credits, promotional_free_grants_credits,
                offer_code_free_grants_credits, win_back_free_grants_credits, billing_retry_spends_credits, refund_preference,
                kind, permanent_credits, to_jsonb(coalesce(entitlements, ARRAY[plan_code])) AS entitlements, offers, introductory_offer,
                billing_plan_type, retention_messages
            FROM payment_product
            WHERE channel = \(channel) AND app_key = \(appKey) AND NOT deleted
            ORDER BY subscription_group_id, plan_level,
                array_position(ARRAY['P1W', 'P1M', 'P2M', 'P3M', 'P6M', 'P1Y'], duration), product_id
            """
        ).map(Self.product)
    }

    private static func product(_ row: PostgresRow) throws -> CatalogueProduct {
        let duration: String = try row.decode("duration")
        let upgradeGrant: String = try row.decode("upgrade_grant")
        let kind: String = try row.decode("kind")
        let billingPlan: String = try row.decode("billing_plan_type")
        guard let duration = ProductDuration(rawValue: duration), let upgradeGrant = UpgradeGrant(rawValue: upgradeGrant),
            let kind = ProductKind(rawValue: kind), let billingPlan = BillingPlan(rawValue: billingPlan)
        else {
            throw PostgresError.decoding(
                column: "duration/upgrade_grant/kind/billing_plan_type", reason: "a value the domain does not know")
        }
        return CatalogueProduct(
            productID: try row.decode("product_id"), subscriptionGroupID: try row.decode("subscription_group_id"),
            planCode: try row.decode("plan_code"), planLevel: try row.decode("plan_level"), duration: duration,
            creditsAmount: try row.decode("credits_amount"), enabled: try row.decode("enabled"),
            trialGrantsCredits: try row.decode("trial_grants_credits"), upgradeGrant: upgradeGrant,
            familySharedGrantsCredits: try row.decode("family_shared_grants_credits"),
            freePeriodGrantsCredits: [
                .promotional: try row.decode("promotional_free_grants_credits", as: Bool?.self),
                .offerCode: try row.decode("offer_code_free_grants_credits", as: Bool?.self),
                .winBack: try row.decode("win_back_free_grants_credits", as: Bool?.self),
            ].compactMapValues { $0 },
            billingRetrySpendsCredits: try row.decode("billing_retry_spends_credits"),
            refundPreference: try row.decode("refund_preference", as: String?.self).flatMap(RefundPreference.init(rawValue:)),
            kind: kind, permanentCredits: try row.decode("permanent_credits"),
            entitlements: try row.decode("entitlements", as: PostgresJSON.self).decode([String].self),
            offers: try row.decode("offers", as: PostgresJSON.self).decode([CatalogueOffer].self),
            introductoryOffer: try row.decode("introductory_offer"), billingPlan: billingPlan,
            retentionMessages: try row.decode("retention_messages", as: PostgresJSON.self).decode([RetentionRule].self))
    }
}

/// A `payment_product` row as the apply step compares and audits it.
private struct StoredProduct {
    let product: CatalogueProduct
    let version: Int
    let deleted: Bool

    /// The audit trail's view of the row: every business column under the file format's names.
    func audit(_ file: CatalogueFile) throws -> PostgresJSON {
        struct Snapshot: Encodable {
            let channel, appKey, productId, subscriptionGroupId, planCode: String
            let planLevel: Int
            let duration: String
            let creditsAmount: Int64
            let enabled, trialGrantsCredits: Bool
            let upgradeGrant: String
            let familySharedGrantsCredits: Bool
            let freePeriodGrantsCredits: [String: Bool]
            let billingRetrySpendsCredits: Bool
            let refundPreference: String?
            let kind: String
            let permanentCredits: Int64
            let entitlements: [String]
            let offers: [CatalogueOffer]
            let introductoryOffer: Bool
            let billingPlanType: String
            let retentionMessages: [RetentionRule]
            let version: Int
            let deleted: Bool
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return try PostgresJSON(
            encoding: Snapshot(
                channel: file.channel, appKey: file.appKey, productId: product.productID,
                subscriptionGroupId: product.subscriptionGroupID, planCode: product.planCode, planLevel: product.planLevel,
                duration: product.duration.rawValue, creditsAmount: product.creditsAmount, enabled: product.enabled,
                trialGrantsCredits: product.trialGrantsCredits, upgradeGrant: product.upgradeGrant.rawValue,
                familySharedGrantsCredits: product.familySharedGrantsCredits,
                freePeriodGrantsCredits: Dictionary(
                    uniqueKeysWithValues: product.freePeriodGrantsCredits.map { ($0.key.catalogueName, $0.value) }),
                billingRetrySpendsCredits: product.billingRetrySpendsCredits, refundPreference: product.refundPreference?.rawValue,
                kind: product.kind.rawValue, permanentCredits: product.permanentCredits,
                entitlements: product.entitlements, offers: product.offers, introductoryOffer: product.introductoryOffer,
                billingPlanType: product.billingPlan.rawValue,
                retentionMessages: product.retentionMessages, version: version, deleted: deleted),
            encoder: encoder)
    }
}
