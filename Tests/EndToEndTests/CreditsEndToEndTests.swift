import AppStore
import AppStoreTestSupport
import Credits
import Crypto
import Domain
import Foundation
import Postgres
import ServiceRuntime
import TestSupport
import Testing

/// Credits through the real pair: the metering API of the ingress (service tokens), grants and
/// refunds applied by a worker, and the time-driven jobs. Time-driven steps call the jobs of
/// `CreditJobs` from the test with a chosen "now" on the same database (the workers' own scheduler
/// runs beside them with the real clock, which is safe: that is the several-workers case).
@Suite(.serialized, .timeLimit(.minutes(4)))
struct CreditsEndToEndTests {
    static let day: TimeInterval = 86_400
    static let credit = Credits.micro
    static let token = Base64URL.encode(SecureRandom.bytes(32))
    static let extra = ["SERVICE_TOKENS": "billing:\(token),search:\(Base64URL.encode(SecureRandom.bytes(32)))"]
    static var service: [String: String] { ["Authorization": "Bearer \(token)"] }

    static func id() -> String { String(UInt64.random(in: 3_000_000_000_000_000...3_999_999_999_999_999)) }

    static func rates(_ pool: PostgresPool) async throws {
        try await CreditRates(pool: pool).apply(
            RatesFile(rates: [
                RateVersion(code: "chat", version: 1, microCreditsPerUnit: 250_000, effectiveFrom: "2026-01-01T00:00:00Z"),
                RateVersion(code: "unit", version: 1, microCreditsPerUnit: credit, effectiveFrom: "2026-01-01T00:00:00Z"),
                RateVersion(code: "big", version: 1, microCreditsPerUnit: 400 * credit, effectiveFrom: "2026-01-01T00:00:00Z"),
            ]), operator: "e2e", reason: "fixture")
    }

    static func use(
        _ client: TestHTTPClient, user: String, units: Int, rate: String = "chat", key: String = UUID().uuidString,
        headers: [String: String] = service
    ) async throws -> TestHTTPResponse {
        try await client.post(
            "/api/v1/credits/usage", json: ["idempotencyKey": key, "userId": user, "units": units, "rate": rate], headers: headers)
    }

    static func code(_ response: TestHTTPResponse) -> String? { (try? response.json())?["code"] as? String }

    func jobs(_ pool: PostgresPool) -> CreditJobs {
        CreditJobs(pool: pool, appKey: IngressHarness.bundleID, configuration: CreditsConfiguration(), logger: Logger(label: "e2e", level: .warning))
    }

    /// The metering API's contract: credentials, exactly-10-of-50 under concurrency, idempotent
    /// retries, conflicts, the check, and every answer matching openapi.json.
    @Test func meteringAPIChargesExactlyWhatTheBalanceCovers() async throws {
        try await IngressHarness.with(extra: Self.extra) { harness in
            try await Self.rates(harness.pool)
            try await harness.pool.query("INSERT INTO app_user (user_id) VALUES ('alice')")
            try await harness.pool.transaction { db in
                try await CreditLedger(pool: harness.pool).grant(
                    [
                        CreditGrant(
                            userID: "alice", decision: GrantDecision(grantKey: "seed", pool: .subscription, amount: 10 * Self.credit, reason: "TEST"))
                    ],
                    limits: CreditLimits(), on: db)
            }
            let client = harness.client

            // Only service tokens open the metering API, and they open nothing else.
            #expect(try await Self.use(client, user: "alice", units: 1, headers: [:]).status == 401)
            #expect(try await Self.use(client, user: "alice", units: 1, headers: harness.authorized("alice")).status == 401)
            #expect(try await Self.use(client, user: "alice", units: 1, headers: ["Authorization": "Bearer \(Self.token)x"]).status == 401)
            #expect(try await client.get("/api/v1/credits/balance", headers: Self.service).status == 401)

            // 50 concurrent calls of one credit each on a balance of 10.
            let answers = try await withThrowingTaskGroup(of: TestHTTPResponse.self) { group in
                for _ in 0..<50 { group.addTask { try await Self.use(client, user: "alice", units: 1, rate: "unit") } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let accepted = answers.filter { $0.status == 200 }
            #expect(accepted.count == 10)
            #expect(answers.filter { $0.status == 402 && Self.code($0) == "CREDITS_EXHAUSTED" }.count == 40)
            #expect(try await harness.read("/api/v1/credits/balance", as: "alice")["microCredits"] as? Int == 0)
            #expect(try await harness.pool.withConnection { try await CreditLedger(pool: harness.pool).invariantViolations(on: $0) } == 0)

            // A retried key gets the first answer; another request under it is a conflict.
            try await harness.pool.transaction { db in
                try await CreditLedger(pool: harness.pool).grant(
                    [
                        CreditGrant(
                            userID: "alice", decision: GrantDecision(grantKey: "more", pool: .permanent, amount: 5 * Self.credit, reason: "TEST"))
                    ],
                    limits: CreditLimits(), on: db)
            }
            let first = try await Self.use(client, user: "alice", units: 3, key: "k-1")
            #expect(first.status == 200)
            #expect(try first.json()["cost"] as? String == "0.75")
            let retried = try await client.post(
                "/api/v1/credits/usage", json: ["userId": "alice", "units": 3, "rate": "chat"],
                headers: Self.service.merging(["Idempotency-Key": "k-1"]) { a, _ in a })
            #expect(retried.status == 200 && retried.body == first.body)
            #expect(retried.headers["idempotent-replayed"] == "true")
            let conflict = try await Self.use(client, user: "alice", units: 4, key: "k-1")
            #expect(conflict.status == 409 && Self.code(conflict) == "IDEMPOTENCY_CONFLICT")
            #expect(try await harness.read("/api/v1/credits/balance", as: "alice")["microCredits"] as? Int == 4_250_000)
            let unknown = try await Self.use(client, user: "alice", units: 1, rate: "nope")
            #expect(unknown.status == 422 && Self.code(unknown) == "RATE_UNKNOWN")

            let check = try await client.get("/api/v1/credits/check?userId=alice&units=17&rate=chat", headers: Self.service)
            #expect(check.status == 200)
            #expect(try check.json()["affordable"] as? Bool == true, "17 × 0.25 = 4.25 is exactly the balance")
            let tooMuch = try await client.get("/api/v1/credits/check?userId=alice&units=18&rate=chat", headers: Self.service)
            #expect(try tooMuch.json()["affordable"] as? Bool == false)
            #expect(try await client.get("/api/v1/credits/check?userId=alice&units=x&rate=chat", headers: Self.service).status == 400)

            // Every answer is the one openapi.json documents.
            let document = try OpenAPIDocumentTests.document()
            let validator = SchemaValidator(document: document)
            let operations = OpenAPIDocumentTests.operations(document)
            for (name, response) in [
                ("POST /api/v1/credits/usage", first), ("POST /api/v1/credits/usage", answers.first { $0.status == 402 }!),
                ("POST /api/v1/credits/usage", conflict), ("POST /api/v1/credits/usage", unknown), ("GET /api/v1/credits/check", check),
            ] {
                let responses = try #require(operations[name]?["responses"] as? [String: Any])
                let documented = try #require(validator.resolve(responses[String(response.status)]) as? [String: Any], "\(name) \(response.status)")
                let schema = try #require(((documented["content"] as? [String: Any])?["application/json"] as? [String: Any])?["schema"])
                let problems = validator.validate(try JSONDecoder().decode(JSONValue.self, from: response.body), against: schema, at: "body")
                #expect(problems.isEmpty, "\(name) \(response.status): \(problems)")
            }
            #expect(harness.leakedSecrets().isEmpty)
            #expect(!harness.process.output.contains(Self.token), "the service token was logged")
        }
    }

    /// Scenarios 23 and 24: a purchase's credits spent in fractions in real time, the day closed at
    /// UTC midnight rounded up; then the next paid call refused with CREDITS_EXHAUSTED.
    @Test func fractionalUsageDailyCloseAndExhaustion() async throws {
        let harness = try await WorkerHarness.start(extra: Self.extra)
        defer { harness.stop() }
        try await Self.rates(harness.pool)
        let token = try await harness.user("alice")
        let id = Self.id()
        let purchase = harness.transaction(id, purchase: Date() - 3600, token: token, signed: Date() - 3600)
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
        #expect(try await harness.balance("alice") == 1000)

        // 3 × 0.25 + 2 × 400: 800.75 credits in real time.
        for (units, rate) in [(3, "chat"), (2, "big")] {
            #expect(try await Self.use(harness.client, user: "alice", units: units, rate: rate).status == 200)
        }
        let balance = try await harness.ingress.read("/api/v1/credits/balance", as: "alice")
        #expect(balance["creditsBalance"] as? Int == 199)
        #expect((balance["pools"] as? [String: Any])?["subscription"] as? String == "199.25")

        // Scenario 24: 200 credits are more than 199.25: refused, nothing changes.
        let refused = try await Self.use(harness.client, user: "alice", units: 1, rate: "big")
        #expect(refused.status == 402 && Self.code(refused) == "CREDITS_EXHAUSTED")
        #expect(try await harness.ingress.read("/api/v1/credits/balance", as: "alice")["microCredits"] as? Int == 199_250_000)

        // The day is closed at the next UTC midnight: 800.75 rounds up to 801.
        let today = UTCDay(containing: Date())
        let jobs = jobs(harness.pool)
        #expect(try await jobs.closeDays(now: today.next.start - 1) == 0)
        #expect(try await jobs.closeDays(now: today.next.start) == 1)
        #expect(try await jobs.closeDays(now: today.next.start + 60) == 0)
        let bills = try await harness.ingress.read("/api/v1/credits/daily-bills", as: "alice")
        let bill = try #require((bills["items"] as? [[String: Any]])?.first)
        #expect(bill["day"] as? String == today.text)
        #expect(bill["totalCost"] as? String == "800.75" && bill["charged"] as? String == "801")
        #expect(bill["settled"] as? String == "0.25" && bill["shortfall"] as? String == "0")
        #expect(try await harness.ingress.read("/api/v1/credits/balance", as: "alice")["microCredits"] as? Int == 199_000_000)
        try await harness.checkInvariants()
    }

    /// Scenario 17: a voluntary expiry clears the subscription pool at the next UTC midnight, once;
    /// the permanent pool stays.
    @Test func voluntaryExpiryClearsTheSubscriptionPoolAtTheNextUTCMidnight() async throws {
        let harness = try await WorkerHarness.start(extra: Self.extra)
        defer { harness.stop() }
        let token = try await harness.user("bob")
        let now = Date()
        let id = Self.id()
        let purchase = harness.transaction(id, purchase: now - 31 * Self.day, token: token, signed: now - 7200)
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
        try await harness.pool.transaction { db in
            try await CreditLedger(pool: harness.pool).adjust(
                userID: "bob", pool: .permanent, amount: 5 * Self.credit, adjustmentNo: "E2E-1", operator: "e2e", reason: "test",
                limits: CreditLimits(), on: db)
        }
        let expired = try await harness.notify(
            .expired, .voluntary, transaction: purchase, renewal: harness.renewalInfo(original: id, autoRenew: false, signed: now - 3600))
        #expect(try await harness.outcome(of: expired) == .succeeded)
        #expect(try await harness.subscription(id)?.status == "EXPIRED")
        let ended = try #require(
            try await harness.value(
                "SELECT max(created_at) FROM status_history WHERE entity_type = 'SUBSCRIPTION' AND current_status = 'EXPIRED'", as: Date.self))
        let midnight = UTCDay(containing: ended).next.start
        let jobs = jobs(harness.pool)
        #expect(try await jobs.clearExpiredPools(now: midnight - 1) == 0)
        #expect(try await harness.balance("bob") == 1000, "kept until midnight")
        #expect(try await jobs.clearExpiredPools(now: midnight) == 1)
        #expect(try await jobs.clearExpiredPools(now: midnight + Self.day) == 0)
        #expect(try await harness.balance("bob") == 0)
        #expect(
            try await harness.value(
                "SELECT balance FROM credit_account WHERE user_id = 'bob' AND pool = 'PERMANENT'", as: Int64.self) == 5 * Self.credit)
        #expect(try await harness.count("SELECT count(*) FROM credit_ledger WHERE entry_type = 'EXPIRY_CLEARING' AND delta = -1000000000") == 1)
        try await harness.checkInvariants()
    }

    /// Scenario 18 with real usage: a refund takes back what remains of the grant (never below
    /// zero, the spent part recorded), a declined refund changes nothing, a reversal restores.
    @Test func refundAfterRealUsageDeclinedAndReversed() async throws {
        let harness = try await WorkerHarness.start(extra: Self.extra)
        defer { harness.stop() }
        try await Self.rates(harness.pool)
        let token = try await harness.user("carol")
        let now = Date()
        let id = Self.id()
        let purchase = harness.transaction(id, purchase: now - Self.day, token: token, signed: now - 7200)
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
        #expect(try await Self.use(harness.client, user: "carol", units: 1, rate: "big").status == 200)

        var refunded = purchase
        refunded.revocationDate = TestPayloads.wholeMilliseconds(now - 3600)
        refunded.revocationReason = .refundedDueToIssue
        refunded.signedDate = TestPayloads.wholeMilliseconds(now - 3600)
        #expect(try await harness.outcome(of: try await harness.notify(.refund, transaction: refunded)) == .succeeded)
        #expect(try await harness.balance("carol") == 0)
        #expect(
            try await harness.value(
                "SELECT revoked_amount / 1000000 || '/' || unrecoverable_amount / 1000000 FROM credit_grant", as: String.self) == "600/400")
        let exhausted = try await Self.use(harness.client, user: "carol", units: 1, rate: "chat")
        #expect(exhausted.status == 402)

        #expect(try await harness.outcome(of: try await harness.notify(.refundDeclined, transaction: purchase)) == .succeeded)
        #expect(try await harness.balance("carol") == 0)
        var reversed = purchase
        reversed.signedDate = TestPayloads.wholeMilliseconds(now - 60)
        #expect(try await harness.outcome(of: try await harness.notify(.refundReversed, transaction: reversed)) == .succeeded)
        #expect(try await harness.balance("carol") == 600)
        #expect(
            try await harness.value(
                "SELECT string_agg(entry_type || ':' || (delta / 1000000), ',' ORDER BY id) FROM credit_ledger", as: String.self)
                == "GRANT:1000,USAGE:-400,REVOCATION:-600,RESTORATION:600")
        try await harness.checkInvariants()
    }

    /// Scenario 28: a yearly plan gets its first month at purchase and each later month on the
    /// anchor day, 12 in all, each once, however often the job runs; nothing after the year.
    @Test func yearlyPlanGetsTwelveMonthlyGrantsOnTheAnchorDayEachOnce() async throws {
        let harness = try await WorkerHarness.start(extra: Self.extra)
        defer { harness.stop() }
        let token = try await harness.user("dave")
        let purchaseDate = TestPayloads.wholeMilliseconds(Date() - 3600)
        let id = Self.id()
        let purchase = harness.transaction(
            id, product: WorkerHarness.proYearly, purchase: purchaseDate, days: 365, token: token, signed: Date() - 3600)
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
        #expect(try await harness.balance("dave") == 3000)

        let jobs = jobs(harness.pool)
        let dates = CreditRules.monthlyGrantDates(purchase: purchaseDate, months: 12, expires: purchaseDate + 365 * Self.day)
        #expect(dates.count == 12)
        for (month, date) in dates.enumerated().dropFirst() {
            #expect(try await jobs.grantPlanMonths(now: date - 1) == 0, "month \(month) not before its anchor")
            #expect(try await jobs.grantPlanMonths(now: date) == 1, "month \(month)")
            #expect(try await jobs.grantPlanMonths(now: date + 3600) == 0, "month \(month) once")
            #expect(try await harness.balance("dave") == Int64(3000 * (month + 1)))
        }
        #expect(try await jobs.grantPlanMonths(now: purchaseDate + 400 * Self.day) == 0)
        #expect(try await harness.count("SELECT count(*) FROM credit_grant WHERE transaction_id = \(id)") == 12)
        let grants = try await harness.ingress.read("/api/v1/credits/grants?limit=100", as: "dave")
        #expect((grants["items"] as? [Any])?.count == 12)
        try await harness.checkInvariants()
    }

    /// A 6-month plan (P6M) grants its first month with the purchase and the five others on the
    /// anchor day, each once; nothing after its sixth month.
    @Test func sixMonthPlanGrantsSixMonths() async throws {
        let harness = try await WorkerHarness.start(extra: Self.extra)
        defer { harness.stop() }
        let half = "com.example.pro.halfyear"
        try await harness.addProduct(half, level: 1, duration: "P6M", credits: 2000)
        let token = try await harness.user("hana")
        let purchaseDate = TestPayloads.wholeMilliseconds(Date() - 3600)
        let id = Self.id()
        let purchase = harness.transaction(id, product: half, purchase: purchaseDate, days: 182, token: token, signed: Date() - 3600)
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
        #expect(try await harness.balance("hana") == 2000)

        let jobs = jobs(harness.pool)
        let dates = CreditRules.monthlyGrantDates(purchase: purchaseDate, months: 6, expires: purchaseDate + 182 * Self.day)
        #expect(dates.count == 6)
        for (month, date) in dates.enumerated().dropFirst() {
            #expect(try await jobs.grantPlanMonths(now: date - 1) == 0, "month \(month) not before its anchor")
            #expect(try await jobs.grantPlanMonths(now: date) == 1, "month \(month)")
            #expect(try await jobs.grantPlanMonths(now: date + 3600) == 0, "month \(month) once")
        }
        #expect(try await jobs.grantPlanMonths(now: purchaseDate + 200 * Self.day) == 0)
        #expect(try await harness.balance("hana") == 12_000)
        #expect(try await harness.count("SELECT count(*) FROM credit_grant WHERE transaction_id = \(id)") == 6)
        try await harness.checkInvariants()
    }

    /// A weekly plan (P1W) grants its weekly amount with each paid week: the purchase and five
    /// renewals are six grants; a renewal delivered twice grants once, and the month job leaves
    /// weekly plans alone.
    @Test func weeklyPlanOverFiveRenewals() async throws {
        let harness = try await WorkerHarness.start(extra: Self.extra)
        defer { harness.stop() }
        let weekly = "com.example.starter.weekly"
        try await harness.addProduct(weekly, level: 2, duration: "P1W", credits: 250)
        let token = try await harness.user("wes")
        let week: TimeInterval = 7 * Self.day
        let start = TestPayloads.wholeMilliseconds(Date() - 5 * week - 3600)
        let original = Self.id()
        // Signed now: the test certificates are made at test time and must be valid when they signed.
        let signed = Date() - 600
        let purchase = harness.transaction(original, product: weekly, purchase: start, days: 7, token: token, signed: signed)
        let first = try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: purchase))
        #expect(first == .succeeded, "\(first)")
        var renewals: [JWSTransactionDecodedPayload] = []
        for index in 1...5 {
            let date = start + Double(index) * week
            let renewal = harness.transaction(
                Self.id(), original: original, product: weekly, purchase: date, days: 7, token: token, reason: .renewal,
                signed: signed + Double(index))
            renewals.append(renewal)
            #expect(try await harness.outcome(of: try await harness.notify(.didRenew, transaction: renewal)) == .succeeded)
            #expect(try await harness.balance("wes") == Int64(250 * (index + 1)), "week \(index)")
        }
        #expect(try await harness.outcome(of: try await harness.notify(.didRenew, transaction: renewals[2])) == .succeeded)
        #expect(try await jobs(harness.pool).grantPlanMonths(now: Date() + 40 * Self.day) == 0)
        #expect(try await harness.balance("wes") == 1500)
        #expect(try await harness.count("SELECT count(*) FROM credit_grant WHERE original_transaction_id = \(original)") == 6)
        try await harness.checkInvariants()
    }

    /// A same-level, same-duration switch A→B→A in one period, as Apple delivers it (at once, as
    /// `DID_CHANGE_RENEWAL_PREF` / `UPGRADE`): B grants the difference, the way back and a
    /// redelivery nothing; the products listing says such a switch happens NOW.
    @Test func sameLevelSwitchBackAndForthInOnePeriod() async throws {
        let harness = try await WorkerHarness.start(extra: Self.extra)
        defer { harness.stop() }
        let team = "com.example.team.monthly"
        try await harness.addProduct(team, level: 2, duration: "P1M", credits: 1200)
        let token = try await harness.user("sam")
        let start = TestPayloads.wholeMilliseconds(Date() - 10 * Self.day)
        let original = Self.id()
        let signed = Date() - 600
        let purchase = harness.transaction(original, purchase: start, days: 30, token: token, signed: signed)
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
        let listing = try #require(try await harness.ingress.read("/api/v1/subscriptions/products", as: "sam")["products"] as? [[String: Any]])
        let teamView = try #require(listing.first { $0["productId"] as? String == team })
        #expect(teamView["relation"] as? String == "CROSSGRADE" && teamView["changeTiming"] as? String == "NOW")

        var switches: [JWSTransactionDecodedPayload] = []
        for (index, product) in [team, WorkerHarness.starter].enumerated() {
            let date = start + Double(index + 1) * Self.day
            let change = harness.transaction(
                Self.id(), original: original, product: product, purchase: date, days: 30, token: token, signed: signed + Double(index + 1))
            switches.append(change)
            #expect(try await harness.outcome(of: try await harness.notify(.didChangeRenewalPref, .upgrade, transaction: change)) == .succeeded)
        }
        #expect(try await harness.outcome(of: try await harness.notify(.didChangeRenewalPref, .upgrade, transaction: switches[0])) == .succeeded)
        #expect(try await harness.balance("sam") == 1200)
        #expect(try await harness.subscription(original)?.activeProductID == WorkerHarness.starter)
        #expect(
            try await harness.count("SELECT count(*) FROM credit_grant WHERE original_transaction_id = \(original) AND reason = 'CROSSGRADE'") == 1)
        try await harness.checkInvariants()
    }

    /// Offers through the worker: an offer-code free month on a product whose trials do not grant
    /// grants nothing (the paid renewal after it does); a pay-up-front introductory offer of three
    /// months grants its months one by one on the anchor day.
    @Test func offerCodeFreeMonthWithTrialsNotGrantingAndPayUpFrontMonths() async throws {
        let harness = try await WorkerHarness.start(extra: Self.extra)
        defer { harness.stop() }
        try await harness.pool.query("UPDATE payment_product SET trial_grants_credits = false")
        let token = try await harness.user("olga")
        let signed = Date() - 600
        let start = TestPayloads.wholeMilliseconds(Date() - 31 * Self.day)
        let original = Self.id()
        var free = harness.transaction(original, purchase: start, days: 30, token: token, signed: signed)
        free.offerType = .subscriptionOfferCode
        free.offerDiscountType = .freeTrial
        free.offerPeriod = "P1M"
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: free)) == .succeeded)
        #expect(try await harness.balance("olga") == 0)
        #expect(try await harness.value("SELECT offer_period FROM apple_transaction WHERE transaction_id = \(original)", as: String.self) == "P1M")
        let paid = harness.transaction(
            Self.id(), original: original, purchase: start + 30 * Self.day, days: 30, token: token, reason: .renewal, signed: signed + 1)
        #expect(try await harness.outcome(of: try await harness.notify(.didRenew, transaction: paid)) == .succeeded)
        #expect(try await harness.balance("olga") == 1000)

        let upFrontToken = try await harness.user("uma")
        let purchaseDate = TestPayloads.wholeMilliseconds(Date() - 3600)
        let id = Self.id()
        var upFront = harness.transaction(id, purchase: purchaseDate, days: 91, token: upFrontToken, signed: signed)
        upFront.offerType = .introductoryOffer
        upFront.offerDiscountType = .payUpFront
        upFront.offerPeriod = "P3M"
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: upFront)) == .succeeded)
        #expect(try await harness.balance("uma") == 1000)
        let jobs = jobs(harness.pool)
        for date in CreditRules.monthlyGrantDates(purchase: purchaseDate, months: 3, expires: purchaseDate + 91 * Self.day).dropFirst() {
            #expect(try await jobs.grantPlanMonths(now: date - 1) == 0)
            #expect(try await jobs.grantPlanMonths(now: date) == 1)
        }
        #expect(try await jobs.grantPlanMonths(now: purchaseDate + 95 * Self.day) == 0)
        #expect(try await harness.balance("uma") == 3000)
        try await harness.checkInvariants()
    }

    /// Billing retry without grace: the subscription credits are kept but not spendable (402
    /// CREDITS_EXHAUSTED) until Apple recovers the renewal; then they are spendable again.
    @Test func billingRetryRefusesSubscriptionCreditsThenRecovery() async throws {
        let harness = try await WorkerHarness.start(extra: Self.extra)
        defer { harness.stop() }
        try await Self.rates(harness.pool)
        let token = try await harness.user("ben")
        let signed = Date() - 600
        let start = TestPayloads.wholeMilliseconds(Date() - 31 * Self.day)
        let original = Self.id()
        let purchase = harness.transaction(original, purchase: start, days: 30, token: token, signed: signed)
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
        let failure = harness.renewalInfo(original: original, billingRetry: true, signed: signed + 1)
        #expect(
            try await harness.outcome(of: try await harness.notify(.didFailToRenew, transaction: purchase, renewal: failure)) == .succeeded)
        #expect(try await harness.subscription(original)?.status == "BILLING_RETRY")
        let refused = try await Self.use(harness.client, user: "ben", units: 1, rate: "unit")
        #expect(refused.status == 402 && Self.code(refused) == "CREDITS_EXHAUSTED", "\(refused.text)")
        #expect(try await harness.balance("ben") == 1000, "kept while Apple retries")

        let recovered = harness.transaction(
            Self.id(), original: original, purchase: Date() - 60, days: 30, token: token, reason: .renewal, signed: signed + 2)
        #expect(try await harness.outcome(of: try await harness.notify(.didRenew, .billingRecovery, transaction: recovered)) == .succeeded)
        let used = try await Self.use(harness.client, user: "ben", units: 1, rate: "unit")
        #expect(used.status == 200, "\(used.text)")
        #expect(try await harness.balance("ben") == 1999)
        try await harness.checkInvariants()
    }

    /// A price increase Apple announces in the renewal info reaches the app through the worker:
    /// PENDING with the new price, then ACCEPTED.
    @Test func priceIncreaseReachesTheCurrentSubscription() async throws {
        let harness = try await WorkerHarness.start(extra: Self.extra)
        defer { harness.stop() }
        let token = try await harness.user("pia")
        let signed = Date() - 600
        let original = Self.id()
        let purchase = harness.transaction(original, purchase: Date() - 3600, days: 30, token: token, signed: signed)
        #expect(try await harness.outcome(of: try await harness.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
        for (index, (status, expected)) in [(0, "PENDING"), (1, "ACCEPTED")].enumerated() {
            var renewal = harness.renewalInfo(original: original, signed: signed + Double(index + 1))
            renewal.rawPriceIncreaseStatus = Int32(status)
            renewal.renewalPrice = 12_990
            renewal.currency = "EUR"
            let subtype: Subtype = status == 0 ? .pending : .accepted
            #expect(try await harness.outcome(of: try await harness.notify(.priceIncrease, subtype, renewal: renewal)) == .succeeded)
            let current = try await harness.ingress.read("/api/v1/subscriptions/current", as: "pia")
            #expect(current["priceIncreaseStatus"] as? String == expected)
            #expect(current["renewalPrice"] as? Int == 12_990)
            #expect(current["renewalCurrency"] as? String == "EUR")
        }
    }

    /// The worker runs the jobs itself: welcome credits appear for a new user and the ledger check
    /// is exposed as a metric.
    @Test func theWorkerGrantsWelcomeCreditsAndExposesTheLedgerCheck() async throws {
        let harness = try await WorkerHarness.start(
            extra: Self.extra.merging(["WELCOME_CREDITS": "25", "CREDITS_SCHEDULER_INTERVAL_SECONDS": "1"]) { a, _ in a })
        defer { harness.stop() }
        try await harness.user("erin")
        let granted = await eventually(timeout: 30, every: .milliseconds(200)) {
            (try? await harness.value(
                "SELECT balance FROM credit_account WHERE user_id = 'erin' AND pool = 'WELCOME'", as: Int64.self)) == 25 * Self.credit
        }
        #expect(granted)
        #expect(try await harness.count("SELECT count(*) FROM credit_grant WHERE grant_key = 'welcome:erin'") == 1)
        let exposed = await eventually(timeout: 30, every: .milliseconds(200)) {
            let text = (try? await TestHTTPClient(port: harness.workers[0].httpPort ?? 0).get("/metrics").text) ?? ""
            return text.contains("subs_credit_ledger_mismatches 0")
        }
        #expect(exposed)
        try await harness.checkInvariants()
    }
}
