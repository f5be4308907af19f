import Crypto
import Foundation
import Postgres
import ServiceRuntime
import TestSupport
import Testing

/// The client read endpoints of the ingress router: products, current subscriptions, balance,
/// grants and daily bills, their bearer authentication and their signed cursors.
@Suite(.timeLimit(.minutes(3)))
struct ReadRouteTests {
    static let readPaths = [
        "/api/v1/subscriptions/products", "/api/v1/subscriptions/current", "/api/v1/credits/balance",
        "/api/v1/credits/grants", "/api/v1/credits/daily-bills",
    ]

    @Test func refusesMissingMalformedForeignAndExpiredTokens() async throws {
        try await IngressTestApp.with { harness in
            let foreignSecret = Array(Base64URL.encode(SecureRandom.bytes(32)).utf8)
            let header = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8))
            let payload = Base64URL.encode(Array(#"{"sub":"u1","exp":\#(Int(Date().timeIntervalSince1970) + 3600)}"#.utf8))
            let foreign =
                "\(header).\(payload)." + Base64URL.encode(HMACSHA256.authenticate(key: foreignSecret, message: Array("\(header).\(payload)".utf8)))
            let unsigned = Base64URL.encode(Array(#"{"alg":"none"}"#.utf8)) + ".\(payload)."
            let cases: [(String, [String: String])] = [
                ("no header", [:]),
                ("not bearer", ["Authorization": "Basic dXNlcjpwYXNz"]),
                ("garbage", ["Authorization": "Bearer not-a-token"]),
                ("expired", ["Authorization": "Bearer \(harness.userToken("u1", expiresIn: -3600))"]),
                ("other secret", ["Authorization": "Bearer \(foreign)"]),
                ("alg none", ["Authorization": "Bearer \(unsigned)"]),
            ]
            for path in Self.readPaths {
                for (name, headers) in cases {
                    let response = await harness.get(path, headers: headers.merging(["X-Request-Id": "trace-\(name.count)"]) { a, _ in a })
                    #expect(response.status == 401, "\(path) \(name)")
                    let body = try response.json()
                    #expect(body["code"] as? String == "UNAUTHORIZED", "\(path) \(name)")
                    #expect(body["message"] is String)
                    #expect(body["traceId"] as? String == "trace-\(name.count)", "\(path) \(name)")
                }
            }
            #expect(harness.leakedSecrets().isEmpty, "\(harness.leakedSecrets())")
        }
    }

    @Test func anUnknownUserHasNothingYet() async throws {
        try await IngressTestApp.with { harness in
            try await harness.rows.applyDemoCatalogue()
            let products = try await harness.read("/api/v1/subscriptions/products", as: "nobody")["products"] as? [[String: Any]]
            #expect(products?.count == 3)
            #expect(products?.allSatisfy { $0["relation"] as? String == "NEW" } == true)
            #expect(try await harness.read("/api/v1/subscriptions/current", as: "nobody")["subscriptions"] as? [Any] != nil)
            let none = try await harness.read("/api/v1/subscriptions/current", as: "nobody")
            #expect((none["subscriptions"] as? [Any])?.isEmpty == true)
            for key in ["status", "activeProductId", "pendingProductId", "autoRenewEnabled", "expiresAt", "graceExpiresAt", "environment"] {
                #expect(none[key] is NSNull, "\(key): present and null without a subscription")
            }
            let balance = try await harness.read("/api/v1/credits/balance", as: "nobody")
            #expect(balance["creditsBalance"] as? Int == 0)
            #expect(balance["microCredits"] as? Int == 0)
            #expect(balance["pools"] as? [String: String] == ["subscription": "0", "welcome": "0", "permanent": "0"])
            for path in ["/api/v1/credits/grants", "/api/v1/credits/daily-bills"] {
                let page = try await harness.read(path, as: "nobody")
                #expect((page["items"] as? [Any])?.isEmpty == true, "\(path)")
                #expect(page["nextCursor"] is NSNull, "\(path): nextCursor must be present and null")
            }
        }
    }

    @Test func productsCarryTheirRelationToTheCurrentPlan() async throws {
        try await IngressTestApp.with { harness in
            try await harness.rows.applyDemoCatalogue()
            // A withdrawn product is not offered, but a subscriber of it still has it as current plan.
            try await harness.pool.query(
                """
                INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount, enabled)
                VALUES ('com.example.subscriptions', 'com.example.legacy.monthly', '21000000', 'legacy', 3, 'P1M', 500, false),
                       ('com.example.subscriptions', 'com.example.addon.monthly', '22000000', 'addon', 1, 'P1M', 100, true),
                       ('com.example.subscriptions', 'com.example.addon2.monthly', '22000000', 'addon2', 1, 'P1M', 150, true),
                       ('com.example.subscriptions', 'com.example.addon2.weekly', '22000000', 'addon2', 1, 'P1W', 40, true),
                       ('com.example.subscriptions', 'com.example.addon.lite', '22000000', 'lite', 2, 'P1M', 50, true),
                       ('com.other.app', 'com.other.monthly', '23000000', 'other', 1, 'P1M', 100, true)
                """)
            // A credit pack: no group, level, duration or timing; always a new purchase.
            try await harness.pool.query(
                """
                INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount,
                                             kind, permanent_credits)
                VALUES ('com.example.subscriptions', 'com.example.credits.pack100', '', 'pack100', 1, 'P1M', 0, 'CONSUMABLE', 100)
                """)
            try await harness.rows.addSubscription(
                user: "starter", product: "com.example.starter.monthly", status: "ACTIVE", expiresAt: wholeSeconds(86_400))
            try await harness.rows.addSubscription(
                user: "yearly", product: "com.example.pro.yearly", status: "ACTIVE", expiresAt: wholeSeconds(300 * 86_400))
            try await harness.rows.addSubscription(user: "legacy", product: "com.example.legacy.monthly", status: "ACTIVE", expiresAt: nil)
            // Paid period over, grace running: still the current plan.
            try await harness.rows.addSubscription(
                user: "grace", product: "com.example.pro.monthly", status: "ACTIVE", expiresAt: wholeSeconds(-3600),
                graceExpiresAt: wholeSeconds(86_400))
            // Paid period over without grace, and an older expired chain: no current plan.
            try await harness.rows.addSubscription(user: "lapsed", product: "com.example.pro.monthly", status: "ACTIVE", expiresAt: wholeSeconds(-60))
            try await harness.rows.addSubscription(
                user: "lapsed", product: "com.example.starter.monthly", status: "EXPIRED", expiresAt: wholeSeconds(-90 * 86_400))

            func relations(_ user: String) async throws -> [String: String] {
                let products = try #require(try await harness.read("/api/v1/subscriptions/products", as: user)["products"] as? [[String: Any]])
                return Dictionary(uniqueKeysWithValues: products.map { ($0["productId"] as! String, $0["relation"] as! String) })
            }
            let main = ["com.example.starter.monthly", "com.example.pro.monthly", "com.example.pro.yearly"]
            func expected(_ values: [String], addon: String = "NEW") -> [String: String] {
                let addons = ["com.example.addon.monthly", "com.example.addon2.monthly", "com.example.addon2.weekly", "com.example.addon.lite"]
                return Dictionary(uniqueKeysWithValues: zip(main, values)).merging(addons.map { ($0, addon) }) { a, _ in a }
                    .merging(["com.example.credits.pack100": "NEW"]) { a, _ in a }
            }
            #expect(try await relations("starter") == expected(["CURRENT", "UPGRADE", "UPGRADE"]))
            #expect(try await relations("yearly") == expected(["DOWNGRADE", "CROSSGRADE", "CURRENT"]))
            #expect(try await relations("legacy") == expected(["UPGRADE", "UPGRADE", "UPGRADE"]))
            #expect(try await relations("grace") == expected(["DOWNGRADE", "CURRENT", "CROSSGRADE"]))
            #expect(try await relations("lapsed") == expected(["NEW", "NEW", "NEW"]))

            // When Apple applies each switch: a higher level, or the same level and duration, at
            // once; a lower level, or the same level with another duration, at the next renewal.
            try await harness.rows.addSubscription(
                user: "addon", product: "com.example.addon.monthly", status: "ACTIVE", expiresAt: wholeSeconds(86_400))
            func timings(_ user: String) async throws -> [String: String] {
                let products = try #require(try await harness.read("/api/v1/subscriptions/products", as: user)["products"] as? [[String: Any]])
                #expect(products.allSatisfy { $0.keys.contains("changeTiming") }, "changeTiming is always present")
                return Dictionary(
                    uniqueKeysWithValues: products.map { ($0["productId"] as! String, ($0["changeTiming"] as? String) ?? "null") })
            }
            let addonTimings = try await timings("addon")
            #expect(
                addonTimings.filter { $0.key.contains("addon") }
                    == [
                        "com.example.addon.monthly": "null", "com.example.addon2.monthly": "NOW", "com.example.addon2.weekly": "NEXT_RENEWAL",
                        "com.example.addon.lite": "NEXT_RENEWAL",
                    ])
            #expect(try await relations("addon")["com.example.addon2.monthly"] == "CROSSGRADE")
            #expect(
                try await timings("starter").filter { main.contains($0.key) } == Dictionary(uniqueKeysWithValues: zip(main, ["null", "NOW", "NOW"])))
            #expect(
                try await timings("yearly").filter { main.contains($0.key) }
                    == Dictionary(uniqueKeysWithValues: zip(main, ["NEXT_RENEWAL", "NEXT_RENEWAL", "null"])))
            let lapsed = try await timings("lapsed")
            #expect(
                lapsed.filter { $0.key != "com.example.credits.pack100" }.values.allSatisfy { $0 == "NOW" },
                "a first purchase takes effect at once")
            #expect(lapsed["com.example.credits.pack100"] == "null", "a credit pack changes no plan")

            let products = try #require(try await harness.read("/api/v1/subscriptions/products", as: "starter")["products"] as? [[String: Any]])
            let yearly = try #require(products.first { $0["productId"] as? String == "com.example.pro.yearly" })
            #expect(
                Set(yearly.keys) == [
                    "productId", "kind", "planCode", "planLevel", "duration", "creditsAmount", "permanentCredits", "billingPlanType",
                    "subscriptionGroupId", "relation", "changeTiming",
                ])
            #expect(yearly["billingPlanType"] as? String == "BILLED_UPFRONT")
            #expect(yearly["kind"] as? String == "AUTO_RENEWABLE" && yearly["permanentCredits"] as? Int == 0)
            let pack = try #require(products.first { $0["productId"] as? String == "com.example.credits.pack100" })
            #expect(pack["kind"] as? String == "CONSUMABLE" && pack["permanentCredits"] as? Int == 100)
            #expect(pack["planLevel"] is NSNull && pack["duration"] is NSNull && pack["subscriptionGroupId"] is NSNull)
            #expect(pack["billingPlanType"] is NSNull, "Apple bills a credit pack once")
            #expect(yearly["planCode"] as? String == "pro")
            #expect(yearly["planLevel"] as? Int == 1)
            #expect(yearly["duration"] as? String == "P1Y")
            #expect(yearly["creditsAmount"] as? Int == 3000)
            #expect(yearly["subscriptionGroupId"] as? String == "21000000")
        }
    }

    @Test func currentSubscriptionsReportTheirStatusAtReadTime() async throws {
        try await IngressTestApp.with { harness in
            let future = wholeSeconds(10 * 86_400)
            let past = wholeSeconds(-3600)
            let graceEnd = wholeSeconds(2 * 86_400)
            try await harness.rows.addSubscription(
                user: "u1", product: "com.example.pro.monthly", status: "ACTIVE", expiresAt: future,
                pendingProduct: "com.example.starter.monthly", autoRenew: false, originalTransactionID: "1000")
            try await harness.rows.addSubscription(
                user: "u1", product: "com.example.starter.monthly", status: "ACTIVE", expiresAt: past, originalTransactionID: "2000")
            try await harness.rows.addSubscription(
                user: "u1", product: "com.example.starter.monthly", status: "ACTIVE", expiresAt: wholeSeconds(-7200), graceExpiresAt: graceEnd,
                originalTransactionID: "3000")
            try await harness.rows.addSubscription(
                user: "u1", product: "com.example.starter.monthly", status: "GRACE", expiresAt: wholeSeconds(-20 * 86_400),
                graceExpiresAt: wholeSeconds(-4 * 86_400), originalTransactionID: "4000")
            try await harness.rows.addSubscription(
                user: "u1", product: "com.example.pro.yearly", status: "REVOKED", expiresAt: wholeSeconds(-30 * 86_400), familyShared: true,
                environment: "Production", originalTransactionID: "5000")
            try await harness.rows.addSubscription(user: "someone-else", product: "com.example.pro.monthly", status: "ACTIVE", expiresAt: future)

            let subscriptions = try #require(try await harness.read("/api/v1/subscriptions/current", as: "u1")["subscriptions"] as? [[String: Any]])
            #expect(subscriptions.map { $0["originalTransactionId"] as? String } == ["1000", "2000", "3000", "4000", "5000"])
            let byChain = Dictionary(uniqueKeysWithValues: subscriptions.map { ($0["originalTransactionId"] as! String, $0) })
            #expect(byChain["1000"]?["status"] as? String == "ACTIVE")
            #expect(byChain["1000"]?["activeProductId"] as? String == "com.example.pro.monthly")
            #expect(byChain["1000"]?["pendingProductId"] as? String == "com.example.starter.monthly")
            #expect(byChain["1000"]?["autoRenewEnabled"] as? Bool == false)
            #expect(byChain["1000"]?["expiresAt"] as? String == RFC3339.string(from: future))
            #expect(byChain["1000"]?["environment"] as? String == "Sandbox")
            #expect(byChain["1000"]?["isFamilyShared"] as? Bool == false)
            #expect(byChain["2000"]?["status"] as? String == "EXPIRED", "an ACTIVE row past its expiry without grace")
            #expect(byChain["3000"]?["status"] as? String == "GRACE", "an ACTIVE row past its expiry within grace")
            #expect(byChain["3000"]?["graceExpiresAt"] as? String == RFC3339.string(from: graceEnd))
            #expect(byChain["4000"]?["status"] as? String == "BILLING_RETRY", "a GRACE row whose grace is over")
            #expect(byChain["4000"]?["graceExpiresAt"] is NSNull, "written out as null, not left out")
            #expect(byChain["2000"]?["pendingProductId"] is NSNull, "written out as null, not left out")
            #expect(byChain["5000"]?["status"] as? String == "REVOKED")
            #expect(byChain["5000"]?["environment"] as? String == "Production")
            #expect(byChain["5000"]?["isFamilyShared"] as? Bool == true)
            #expect((byChain["1000"]?["expiresAt"] as? String)?.hasSuffix("Z") == true)

            // Beside the list, the chain that counts now (the first with service) at the top level.
            let current = try await harness.read("/api/v1/subscriptions/current", as: "u1")
            #expect(current["originalTransactionId"] as? String == "1000")
            #expect(current["status"] as? String == "ACTIVE")
            #expect(current["activeProductId"] as? String == "com.example.pro.monthly")
            #expect(current["pendingProductId"] as? String == "com.example.starter.monthly")
            #expect(current["autoRenewEnabled"] as? Bool == false)
            #expect(current["expiresAt"] as? String == RFC3339.string(from: future))
            #expect(current["graceExpiresAt"] is NSNull)
            #expect(current["environment"] as? String == "Sandbox")
            // Without service anywhere, the latest chain.
            try await harness.rows.addSubscription(
                user: "lapsed", product: "com.example.starter.monthly", status: "EXPIRED", expiresAt: past, originalTransactionID: "6000")
            try await harness.rows.addSubscription(
                user: "lapsed", product: "com.example.pro.monthly", status: "EXPIRED", expiresAt: wholeSeconds(-90 * 86_400),
                originalTransactionID: "7000")
            let lapsed = try await harness.read("/api/v1/subscriptions/current", as: "lapsed")
            #expect(lapsed["originalTransactionId"] as? String == "6000")
            #expect(lapsed["status"] as? String == "EXPIRED")
            for key in ["priceIncreaseStatus", "renewalPrice", "renewalCurrency"] {
                #expect(lapsed[key] is NSNull, "\(key): present and null without renewal info")
            }
            let nobody = try await harness.read("/api/v1/subscriptions/current", as: "nobody")
            #expect(nobody["priceIncreaseStatus"] is NSNull && nobody["renewalPrice"] is NSNull && nobody["renewalCurrency"] is NSNull)
        }
    }

    /// A price increase as Apple's renewal info tells it (priceIncreaseStatus 0: not answered yet,
    /// 1: accepted), in each chain and at the top level for the chain that counts, so the app can
    /// ask for consent.
    @Test func currentSubscriptionsCarryPriceIncreases() async throws {
        try await IngressTestApp.with { harness in
            let future = wholeSeconds(10 * 86_400)
            try await harness.rows.addSubscription(
                user: "p1", product: "com.example.pro.monthly", status: "ACTIVE", expiresAt: future, originalTransactionID: "8100")
            try await harness.rows.addSubscription(
                user: "p1", product: "com.example.starter.monthly", status: "EXPIRED", expiresAt: wholeSeconds(-86_400),
                originalTransactionID: "8200")
            try await harness.rows.addSubscription(
                user: "p1", product: "com.example.starter.monthly", status: "EXPIRED", expiresAt: wholeSeconds(-2 * 86_400),
                originalTransactionID: "8300")
            try await harness.pool.query(
                """
                INSERT INTO apple_renewal_info (environment, original_transaction_id, product_id, auto_renew_enabled,
                                                price_increase_status, renewal_price, renewal_currency, signed_date)
                VALUES ('Sandbox', '8100', 'com.example.pro.monthly', true, 0, 12990, 'EUR', now()),
                       ('Sandbox', '8200', 'com.example.starter.monthly', true, 1, 5990, 'USD', now()),
                       ('Sandbox', '8300', 'com.example.starter.monthly', true, NULL, 4990, 'USD', now())
                """)
            let current = try await harness.read("/api/v1/subscriptions/current", as: "p1")
            #expect(current["priceIncreaseStatus"] as? String == "PENDING")
            #expect(current["renewalPrice"] as? Int == 12990)
            #expect(current["renewalCurrency"] as? String == "EUR")
            let chains = try #require(current["subscriptions"] as? [[String: Any]])
            let byChain = Dictionary(uniqueKeysWithValues: chains.map { ($0["originalTransactionId"] as! String, $0) })
            #expect(byChain["8200"]?["priceIncreaseStatus"] as? String == "ACCEPTED")
            #expect(byChain["8200"]?["renewalPrice"] as? Int == 5990)
            #expect(byChain["8300"]?["priceIncreaseStatus"] is NSNull)
            #expect(byChain["8300"]?["renewalCurrency"] as? String == "USD")
        }
    }

    @Test func balanceAddsThePoolsInWholeCredits() async throws {
        try await IngressTestApp.with { harness in
            try await harness.rows.addUser("u1")
            try await harness.rows.addUser("u2")
            try await harness.pool.query(
                """
                INSERT INTO credit_account (user_id, pool, balance)
                VALUES ('u1', 'SUBSCRIPTION', 1000500000), ('u1', 'WELCOME', 750000), ('u1', 'PERMANENT', 20000000),
                       ('u2', 'PERMANENT', 999999)
                """)
            let balance = try await harness.read("/api/v1/credits/balance", as: "u1")
            #expect(balance["creditsBalance"] as? Int == 1021)
            #expect(balance["microCredits"] as? Int == 1_021_250_000)
            #expect(balance["pools"] as? [String: String] == ["subscription": "1000.5", "welcome": "0.75", "permanent": "20"])
            let small = try await harness.read("/api/v1/credits/balance", as: "u2")
            #expect(small["creditsBalance"] as? Int == 0, "a partial credit is not a whole one")
            #expect(small["pools"] as? [String: String] == ["subscription": "0", "welcome": "0", "permanent": "0.999999"])
        }
    }

    /// Pages until `nextCursor` is null; returns the pages' item lists.
    static func pages(_ harness: IngressTestApp, _ path: String, user: String, limit: Int?) async throws -> [[[String: Any]]] {
        var pages: [[[String: Any]]] = []
        var cursor: String?
        repeat {
            var query: [String] = []
            if let limit { query.append("limit=\(limit)") }
            if let cursor { query.append("cursor=\(cursor)") }
            let page = try await harness.read(path + (query.isEmpty ? "" : "?" + query.joined(separator: "&")), as: user)
            pages.append(try #require(page["items"] as? [[String: Any]]))
            cursor = page["nextCursor"] as? String
            if cursor == nil { #expect(page["nextCursor"] is NSNull) }
            #expect(pages.count <= 50, "paging does not end")
        } while cursor != nil && pages.count <= 50
        return pages
    }

    @Test func grantsPageWithoutDuplicatesOrGaps() async throws {
        try await IngressTestApp.with { harness in
            try await harness.rows.addUser("u1")
            try await harness.rows.addUser("u2")
            // 30 grants committed together share one created_at (only the id orders them), 15 more
            // spread over time, and another user's grants that must never show.
            try await harness.pool.query(
                """
                INSERT INTO credit_grant (grant_key, user_id, pool, amount, reason, environment, transaction_id)
                SELECT 'same:' || n, 'u1', 'SUBSCRIPTION', n * 1000000, 'RENEWAL', 'Sandbox', 'tx' || n FROM generate_series(1, 30) n
                """)
            try await harness.pool.query(
                """
                INSERT INTO credit_grant (grant_key, user_id, pool, amount, revoked_amount, reason, created_at)
                SELECT 'spread:' || n, 'u1', 'WELCOME', 1500000, 250000, 'WELCOME', now() - n * interval '1 hour' FROM generate_series(1, 15) n
                """)
            try await harness.pool.query(
                """
                INSERT INTO credit_grant (grant_key, user_id, pool, amount, reason)
                SELECT 'other:' || n, 'u2', 'PERMANENT', 1000000, 'PURCHASE' FROM generate_series(1, 5) n
                """)
            let expectedOrder = try await harness.pool.query(
                "SELECT grant_key FROM credit_grant WHERE user_id = 'u1' ORDER BY created_at DESC, id DESC"
            ).map { try $0.decode("grant_key", as: String.self) }
            #expect(expectedOrder.count == 45)

            let pages = try await Self.pages(harness, "/api/v1/credits/grants", user: "u1", limit: 20)
            #expect(pages.map(\.count) == [20, 20, 5])
            let keys = pages.flatMap { $0.map { $0["grantKey"] as? String ?? "" } }
            #expect(keys == expectedOrder, "every grant once, newest first")

            #expect(try await Self.pages(harness, "/api/v1/credits/grants", user: "u1", limit: nil).map(\.count) == [20, 20, 5], "default limit 20")
            #expect(try await Self.pages(harness, "/api/v1/credits/grants", user: "u1", limit: 7).flatMap { $0 }.count == 45)
            #expect(try await Self.pages(harness, "/api/v1/credits/grants", user: "u1", limit: 1000).map(\.count) == [45], "capped at 100")

            let first = try #require(pages.first?.first)
            #expect(Set(first.keys) == ["grantKey", "pool", "amount", "revokedAmount", "reason", "transactionId", "createdAt"])
            #expect(first["grantKey"] as? String == "same:30")
            #expect(first["amount"] as? String == "30")
            #expect(first["revokedAmount"] as? String == "0")
            #expect(first["pool"] as? String == "SUBSCRIPTION")
            #expect(first["transactionId"] as? String == "tx30")
            #expect((first["createdAt"] as? String).flatMap(RFC3339.date(from:)) != nil)
            let spread = try #require(pages.last?.last)
            #expect(spread["grantKey"] as? String == "spread:15")
            #expect(spread["amount"] as? String == "1.5")
            #expect(spread["revokedAmount"] as? String == "0.25")
            #expect(spread["transactionId"] is NSNull, "written out as null, not left out")

            for bad in ["0", "-1", "abc", "1.5", "99999999999999999999"] {
                let response = await harness.get("/api/v1/credits/grants?limit=\(bad)", headers: harness.authorized("u1"))
                #expect(response.status == 400, "limit=\(bad)")
                #expect(try response.json()["code"] as? String == "INVALID_REQUEST", "limit=\(bad)")
            }
        }
    }

    @Test func dailyBillsPageByDay() async throws {
        try await IngressTestApp.with { harness in
            try await harness.rows.addUser("u1")
            try await harness.pool.query(
                """
                INSERT INTO credit_daily_bill (user_id, day, total_cost, charged, rounding, settled, shortfall, closed_at)
                SELECT 'u1', date '2026-01-01' + n, 2250000, 3000000, 750000, 500000, 250000, timestamptz '2026-01-02 00:05:00+00' + n * interval '1 day'
                FROM generate_series(0, 44) n
                """)
            try await harness.pool.query(
                "INSERT INTO credit_daily_bill (user_id, day, total_cost) VALUES ('u1', date '2026-03-01', 100)")
            let pages = try await Self.pages(harness, "/api/v1/credits/daily-bills", user: "u1", limit: 20)
            #expect(pages.map(\.count) == [20, 20, 6])
            let days = pages.flatMap { $0.map { $0["day"] as? String ?? "" } }
            #expect(days.count == 46)
            #expect(Set(days).count == 46)
            #expect(days == days.sorted(by: >), "latest day first")
            let open = try #require(pages.first?.first)
            #expect(open["day"] as? String == "2026-03-01")
            #expect(open["totalCost"] as? String == "0.0001")
            #expect(open["closedAt"] is NSNull, "written out as null, not left out")
            let closed = try #require(pages.last?.last)
            #expect(closed["day"] as? String == "2026-01-01")
            #expect(closed["totalCost"] as? String == "2.25")
            #expect(closed["charged"] as? String == "3")
            #expect(closed["rounding"] as? String == "0.75")
            #expect(closed["settled"] as? String == "0.5")
            #expect(closed["shortfall"] as? String == "0.25")
            #expect(closed["closedAt"] as? String == "2026-01-02T00:05:00Z")
        }
    }

    /// With `DATABASE_READ_URL` the lists (grants, daily bills) are read from that database and the
    /// rest (the balance) still from `DATABASE_URL`: here two databases that disagree on purpose.
    @Test func listsReadFromTheReplicaWhenOneIsConfigured() async throws {
        let replica = try await TestDatabase.make("replica")
        do {
            try await IngressTestApp.with(extra: ["DATABASE_READ_URL": replica.url]) { harness in
                for pool in [harness.pool, replica.pool] {
                    try await pool.query("INSERT INTO app_user (user_id) VALUES ('u1')")
                }
                try await harness.pool.query(
                    """
                    WITH grant_row AS (
                        INSERT INTO credit_grant (grant_key, user_id, pool, amount, reason) VALUES ('on-primary', 'u1', 'PERMANENT', 1000000, 'PURCHASE')
                    ), bill AS (INSERT INTO credit_daily_bill (user_id, day) VALUES ('u1', date '2026-01-01'))
                    INSERT INTO credit_account (user_id, pool, balance) VALUES ('u1', 'PERMANENT', 7000000)
                    """)
                try await replica.pool.query(
                    """
                    WITH grant_row AS (
                        INSERT INTO credit_grant (grant_key, user_id, pool, amount, reason)
                        VALUES ('on-replica-1', 'u1', 'PERMANENT', 1000000, 'PURCHASE'), ('on-replica-2', 'u1', 'PERMANENT', 1000000, 'PURCHASE')
                    )
                    INSERT INTO credit_daily_bill (user_id, day) VALUES ('u1', date '2026-02-01'), ('u1', date '2026-02-02')
                    """)
                let grants = try await Self.pages(harness, "/api/v1/credits/grants", user: "u1", limit: nil).flatMap { $0 }
                #expect(Set(grants.map { $0["grantKey"] as? String ?? "" }) == ["on-replica-1", "on-replica-2"])
                let bills = try await Self.pages(harness, "/api/v1/credits/daily-bills", user: "u1", limit: nil).flatMap { $0 }
                #expect(bills.map { $0["day"] as? String ?? "" } == ["2026-02-02", "2026-02-01"])
                #expect(try await harness.read("/api/v1/credits/balance", as: "u1")["creditsBalance"] as? Int == 7)
            }
            await replica.close()
        } catch {
            await replica.close()
            throw error
        }
    }

    @Test func cursorsAreTamperEvidentAndBoundToTheirListAndUser() async throws {
        try await IngressTestApp.with { harness in
            try await harness.rows.addUser("u1")
            try await harness.pool.query(
                """
                INSERT INTO credit_grant (grant_key, user_id, pool, amount, reason)
                SELECT 'g' || n, 'u1', 'SUBSCRIPTION', 1000000, 'RENEWAL' FROM generate_series(1, 5) n
                """)
            try await harness.pool.query(
                "INSERT INTO credit_daily_bill (user_id, day) SELECT 'u1', date '2026-01-01' + n FROM generate_series(1, 5) n")
            let page = try await harness.read("/api/v1/credits/grants?limit=2", as: "u1")
            let cursor = try #require(page["nextCursor"] as? String)
            let parts = cursor.split(separator: ".").map(String.init)
            #expect(parts.count == 2)
            // The genuine cursor works.
            let next = try await harness.read("/api/v1/credits/grants?limit=2&cursor=\(cursor)", as: "u1")
            #expect((next["items"] as? [Any])?.count == 2)

            func flip(_ text: String, at index: Int) -> String {
                var characters = Array(text)
                characters[index] = characters[index] == "A" ? "B" : "A"
                return String(characters)
            }
            // A payload naming a later position, re-encoded but signed with a key the server does not hold.
            var payload = try #require(Base64URL.decode(parts[0]))
            var object = try #require(try JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any])
            object["i"] = 1
            payload = Array(try JSONSerialization.data(withJSONObject: object))
            let forged = Base64URL.encode(payload) + "." + Base64URL.encode(HMACSHA256.authenticate(key: SecureRandom.bytes(32), message: payload))
            let unsignedEdit = Base64URL.encode(payload) + "." + parts[1]

            let refused: [(String, String, String)] = [
                ("payload tampered", "/api/v1/credits/grants", flip(parts[0], at: 3)),
                ("mac tampered", "/api/v1/credits/grants", flip(parts[1], at: 3)),
                ("edited payload, old mac", "/api/v1/credits/grants", unsignedEdit),
                ("forged with another key", "/api/v1/credits/grants", forged),
                ("mac missing", "/api/v1/credits/grants", parts[0]),
                ("three parts", "/api/v1/credits/grants", cursor + ".x"),
                ("not base64url", "/api/v1/credits/grants", "%2B%2F%3D.abc"),
                ("garbage", "/api/v1/credits/grants", "hello"),
                ("too long", "/api/v1/credits/grants", String(repeating: "A", count: 600) + "." + parts[1]),
                ("other list", "/api/v1/credits/daily-bills", cursor),
            ]
            for (name, path, bad) in refused {
                let response = await harness.get("\(path)?limit=2&cursor=\(bad)", headers: harness.authorized("u1"))
                #expect(response.status == 400, "\(name)")
                let body = try response.json()
                #expect(body["code"] as? String == "INVALID_CURSOR", "\(name)")
                #expect(body["message"] is String && body["traceId"] is String, "\(name)")
            }
            // Another user presenting u1's cursor.
            let foreign = await harness.get("/api/v1/credits/grants?cursor=\(cursor)", headers: harness.authorized("u2"))
            #expect(foreign.status == 400)
            #expect(try foreign.json()["code"] as? String == "INVALID_CURSOR")
            // And a daily-bills cursor is refused by the grants list.
            let bills = try await harness.read("/api/v1/credits/daily-bills?limit=2", as: "u1")
            let billsCursor = try #require(bills["nextCursor"] as? String)
            let crossed = await harness.get("/api/v1/credits/grants?cursor=\(billsCursor)", headers: harness.authorized("u1"))
            #expect(crossed.status == 400)
            #expect(harness.leakedSecrets().isEmpty, "\(harness.leakedSecrets())")
        }
    }
}
