import Domain
import Foundation
import Postgres
import ServiceRuntime

/// A metered call to charge: `units` at the rate `rateCode` in force at `occurredAt` (now when nil).
public struct UsageRequest: Sendable, Hashable {
    /// The calling service, from its credential: idempotency keys are per service.
    public var service: String
    public var idempotencyKey: String
    public var userID: String
    public var units: Int64
    public var rateCode: String
    public var occurredAt: Date?

    public init(service: String, idempotencyKey: String, userID: String, units: Int64, rateCode: String, occurredAt: Date?) {
        self.service = service
        self.idempotencyKey = idempotencyKey
        self.userID = userID
        self.units = units
        self.rateCode = rateCode
        self.occurredAt = occurredAt
    }
}

/// Amounts per pool, as exact decimal strings of credits.
public struct PoolAmounts: Codable, Sendable, Hashable {
    public var subscription: String
    public var welcome: String
    public var permanent: String

    public init(_ amounts: [CreditPool: MicroCredits]) {
        subscription = CreditAmount.decimal(amounts[.subscription] ?? 0)
        welcome = CreditAmount.decimal(amounts[.welcome] ?? 0)
        permanent = CreditAmount.decimal(amounts[.permanent] ?? 0)
    }
}

/// A user's balance as the APIs show it.
public struct CreditBalance: Codable, Sendable, Hashable {
    /// Whole credits available now (the total rounded down).
    public var creditsBalance: Int64
    /// The exact total, in millionths of a credit.
    public var microCredits: Int64
    public var pools: PoolAmounts

    public init(_ pools: [CreditPool: MicroCredits]) {
        let total = pools.values.reduce(MicroCredits(0)) { sum, value in
            let (added, overflow) = sum.addingReportingOverflow(value)
            return overflow ? .max : added
        }
        creditsBalance = Credits.whole(total)
        microCredits = total
        self.pools = PoolAmounts(pools)
    }

    /// The document JSONEncoder writes with sorted keys, written directly: the balance is the most
    /// polled read and JSONEncoder cost as much as the rest of the request. Only integers and
    /// `CreditAmount.decimal` strings (digits, '-', '.') go in: nothing needs escaping.
    public var json: [UInt8] {
        Array(
            """
            {"creditsBalance":\(creditsBalance),"microCredits":\(microCredits),"pools":{"permanent":"\(pools.permanent)",\
            "subscription":"\(pools.subscription)","welcome":"\(pools.welcome)"}}
            """.utf8)
    }
}

/// The answer to an accepted call. Stored as sent, so a retry gets exactly the same answer; its
/// fields are strings and integers only, so decoding and encoding it again gives the same bytes.
public struct UsageReceipt: Codable, Sendable, Hashable {
    public var usageId: Int64
    public var idempotencyKey: String
    public var userId: String
    public var units: Int64
    public var rate: String
    public var rateVersion: Int
    public var cost: String
    public var costMicroCredits: Int64
    /// RFC 3339: the event time that chose the rate version.
    public var occurredAt: String
    /// The UTC day whose bill counts this cost, `YYYY-MM-DD`.
    public var billDay: String
    /// What each pool paid.
    public var drawn: PoolAmounts
    /// The balance right after this call.
    public var balance: CreditBalance
}

/// Whether a call can be afforded now.
public struct Affordability: Codable, Sendable, Hashable {
    public var affordable: Bool
    public var rate: String
    public var rateVersion: Int
    public var cost: String
    public var costMicroCredits: Int64
    public var balance: CreditBalance
}

/// How a usage call ended: its answer as stored, and whether it is the stored first answer of a
/// retried key.
public struct UsageOutcome: Sendable, Hashable {
    /// The answer as stored: sent as is, so a retry gets exactly the same bytes.
    public var json: String
    public var replayed: Bool

    /// The answer decoded (the route sends `json` as it is and never needs this).
    public func receipt() throws -> UsageReceipt { try JSONDecoder().decode(UsageReceipt.self, from: Data(json.utf8)) }
}

/// Why a usage call was refused; nothing changed.
public enum UsageError: Error, Sendable, Hashable {
    /// The balance cannot cover the cost (CREDITS_EXHAUSTED).
    case creditsExhausted(cost: MicroCredits, available: MicroCredits)
    /// No version of this rate is in force at the event time.
    case unknownRate(String)
    /// The idempotency key was used with another request.
    case idempotencyConflict
    /// units × rate is beyond what one call may cost.
    case costTooLarge
    /// A parent withdrew consent for the user (RESCIND_CONSENT): spending credits is using the app,
    /// so none is spent until an operator restores the consent (CONSENT_RESCINDED).
    case consentRescinded
}

/// Exact decimal text of micro-credits.
public enum CreditAmount {
    /// Micro-credits as an exact decimal string of credits without trailing zeros: 1_500_000 → "1.5".
    public static func decimal(_ micro: MicroCredits) -> String { Credits.decimal(micro) }

    /// The exact micro-credits of decimal credits ("3", "-2.5", "0.000001"); nil for anything else
    /// (more than 6 decimals, exponents, spaces, beyond the 64-bit range).
    public static func micro(_ text: String) -> MicroCredits? {
        var rest = Substring(text)
        let negative = rest.first == "-"
        if negative || rest.first == "+" { rest = rest.dropFirst() }
        let parts = rest.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        let whole = parts[0]
        let fraction = parts.count == 2 ? parts[1] : ""
        let isDigits = { (part: Substring) in !part.isEmpty && part.utf8.allSatisfy { $0 >= 0x30 && $0 <= 0x39 } }
        guard isDigits(whole), parts.count == 1 || (isDigits(fraction) && fraction.count <= 6),
            let units = Int64(whole), let decimals = Int64(fraction + String(repeating: "0", count: 6 - fraction.count))
        else { return nil }
        let (scaled, overflow) = units.multipliedReportingOverflow(by: Credits.micro)
        let (magnitude, carry) = scaled.addingReportingOverflow(decimals)
        guard !overflow, !carry else { return nil }
        return negative ? -magnitude : magnitude
    }
}

/// Real-time metering: usage deducted at once from SUBSCRIPTION, then WELCOME, then PERMANENT,
/// or refused changing nothing; each accepted cost also counts toward the user's open daily bill.
public struct CreditMeter: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// The largest cost one call may have (10⁹ credits).
    public static let maximumCost: MicroCredits = 1_000_000_000 * Credits.micro
    /// The largest `units` one call may have.
    public static let maximumUnits: Int64 = 1_000_000_000

    /// Charges a call: one statement, its own transaction, after a read of whether the user's
    /// consent was rescinded (`rescinded`, one more round trip). A concurrent first use of the same key
    /// loses the race on the unique key (the whole statement rolls back) and is answered from the
    /// winner's stored answer.
    public func use(_ request: UsageRequest, now: Date) async throws -> UsageOutcome {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await pool.withConnection { db in
                    guard try await Self.rescinded([(request, now)], on: db).isEmpty else { throw UsageError.consentRescinded }
                    return try await use(request, now: now, on: db)
                }
            } catch PostgresError.uniqueViolation(constraint: "credit_usage_event_key", _) where attempt < 3 {
                continue
            }
        }
    }

    /// Charges a call with one statement on `db`; throws `UsageError` when refused, having changed
    /// nothing. Inside a caller's transaction, a lost race on the key aborts that transaction.
    public func use(_ request: UsageRequest, now: Date, on db: PostgresConnection) async throws -> UsageOutcome {
        let occurredAt = request.occurredAt ?? now
        let row = try await db.query(
            PostgresQuery(
                unsafeSQL: Self.usageSQL,
                binds: [
                    request.service.postgresData, request.idempotencyKey.postgresData, request.userID.postgresData,
                    request.units.postgresData, request.rateCode.postgresData, request.occurredAt.postgresData,
                    occurredAt.postgresData, UTCDay(containing: now).text.postgresData, Self.maximumCost.postgresData,
                    RFC3339.string(from: occurredAt, fractional: true).postgresData,
                ]))[0]
        return try Self.outcome(of: request, row).get()
    }

    /// Charges concurrent calls together, each with the instant it arrived: one statement, one
    /// transaction, one answer per call in order, each the answer the call would get alone (calls
    /// of one user or one key see each other as if sent one after the other). Refusals are
    /// `UsageError` results. When the statement fails on the server (a deadlock, a key a concurrent
    /// call stored first), nothing of it stays and each call is charged alone, in order, so no
    /// caller gets an error it would not get alone; trouble reaching the database is every call's.
    /// Calls of users whose consent was rescinded are refused first (`rescinded`, one read per batch).
    public func use(batch calls: [(request: UsageRequest, now: Date)]) async -> [Result<UsageOutcome, any Error>] {
        if calls.count == 1 { return [await Self.result { try await use(calls[0].request, now: calls[0].now) }] }
        do {
            return try await pool.withConnection { db in
                let refused = try await Self.rescinded(calls, on: db)
                let charged = calls.indices.filter { !refused.contains($0) }
                var outcomes = [Result<UsageOutcome, any Error>](repeating: .failure(UsageError.consentRescinded), count: calls.count)
                guard !charged.isEmpty else { return outcomes }
                for (index, outcome) in zip(charged, try await use(batch: charged.map { calls[$0] }, on: db)) {
                    outcomes[index] = outcome.mapError { $0 }
                }
                return outcomes
            }
        } catch let error as PostgresError where error.sqlState != nil {
            Self.batchFallbacks.increment()
            var outcomes: [Result<UsageOutcome, any Error>] = []
            for call in calls { outcomes.append(await Self.result { try await use(call.request, now: call.now) }) }
            return outcomes
        } catch {
            return calls.map { _ in .failure(error) }
        }
    }

    /// The calls of a batch with one statement on `db` (see `use(batch:pool:)`), with no fallback:
    /// throws when that statement fails, having changed nothing (inside a caller's transaction, it
    /// aborts that transaction).
    public func use(batch calls: [(request: UsageRequest, now: Date)], on db: PostgresConnection) async throws
        -> [Result<UsageOutcome, UsageError>]
    {
        let occurredAt = calls.map { $0.request.occurredAt ?? $0.now }
        let rows = try await db.query(
            PostgresQuery(
                unsafeSQL: Self.batchSQL,
                binds: [
                    PostgresArray(calls.map(\.request.service)).postgresData,
                    PostgresArray(calls.map(\.request.idempotencyKey)).postgresData,
                    PostgresArray(calls.map(\.request.userID)).postgresData,
                    PostgresArray(calls.map(\.request.units)).postgresData,
                    PostgresArray(calls.map(\.request.rateCode)).postgresData,
                    PostgresArray(calls.map(\.request.occurredAt)).postgresData,
                    PostgresArray(occurredAt).postgresData,
                    PostgresArray(calls.map { UTCDay(containing: $0.now).text }).postgresData,
                    Self.maximumCost.postgresData,
                    PostgresArray(occurredAt.map { RFC3339.string(from: $0, fractional: true) }).postgresData,
                ]))
        guard rows.count == calls.count else {
            // The function answers one row per call; anything else is a broken deployment, which
            // the callers see as the statement failing (each call is then charged alone).
            throw PostgresError.server(
                sqlState: "XX000", message: "credit_charge_usage_batch answered \(rows.count) rows for \(calls.count) calls", constraint: nil)
        }
        return try zip(calls, rows).map { try Self.outcome(of: $0.request, $1) }
    }

    /// The positions of the calls whose user's consent was rescinded at or before the call arrived
    /// (`ConsentRescission`). A key stored before is not among them: a retry of a call charged
    /// before the rescission gets its first answer, as any retry does. Read before the charge, not
    /// under the user's lock: a call racing the rescission counts as made before it.
    static func rescinded(_ calls: [(request: UsageRequest, now: Date)], on db: PostgresConnection) async throws -> Set<Int> {
        let rows = try await db.query(
            """
            SELECT (x.ord - 1)::bigint AS position
              FROM unnest(\(PostgresArray(calls.map(\.request.userID)))::text[], \(PostgresArray(calls.map(\.request.service)))::text[],
                          \(PostgresArray(calls.map(\.request.idempotencyKey)))::text[], \(PostgresArray(calls.map(\.now)))::timestamptz[])
                   WITH ORDINALITY AS x(u, s, k, n, ord)
             -- CASE keeps both looks per call and by key, the usage events' only for a rescinded
             -- user: as a join the planner hashed the whole usage table for every batch (metering
             -- fell from 2,371 to 1,360 calls/s, 0.4 ms more PostgreSQL CPU per call).
             WHERE CASE WHEN EXISTS (SELECT 1 FROM app_user au WHERE au.user_id = x.u AND au.consent_rescinded_at <= x.n)
                        THEN NOT EXISTS (SELECT 1 FROM credit_usage_event e WHERE e.service = x.s AND e.idempotency_key = x.k)
                        ELSE false END
            """)
        return Set(try rows.map { Int(try $0.decode("position", as: Int64.self)) })
    }

    /// A call's answer from its row of `credit_charge_usage`: the stored or new answer, or the refusal.
    private static func outcome(of request: UsageRequest, _ row: PostgresRow) throws -> Result<UsageOutcome, UsageError> {
        if let stored = try row.decode("stored", as: String?.self) {
            guard try row.decode("same", as: Bool.self) else { return .failure(.idempotencyConflict) }
            return .success(UsageOutcome(json: stored, replayed: true))
        }
        guard try row.decode("version", as: Int?.self) != nil, let perUnit = try row.decode("per_unit", as: Int64?.self)
        else { return .failure(.unknownRate(request.rateCode)) }
        let cost: MicroCredits
        do { cost = try Self.cost(units: request.units, perUnit: perUnit) } catch { return .failure(error) }
        guard let response = try row.decode("response", as: String?.self) else {
            return .failure(.creditsExhausted(cost: cost, available: try row.decode("available", as: Int64?.self) ?? 0))
        }
        return .success(UsageOutcome(json: response, replayed: false))
    }

    private static func result<T>(_ body: () async throws -> T) async -> Result<T, any Error> {
        do { return .success(try await body()) } catch { return .failure(error) }
    }

    /// Batches whose statement failed and whose calls were charged one by one instead.
    private static let batchFallbacks = MetricsRegistry.shared.counter(
        "subs_credit_usage_batch_fallbacks_total", help: "Usage batches charged call by call after the batch statement failed")

    /// One usage call, in one statement (so one round trip and no BEGIN/COMMIT), $1 to $10: service,
    /// key, user, units, rate code, the event time given (or NULL), the event time used, today
    /// (`YYYY-MM-DD`), the largest cost, the event time used as RFC 3339 text. The stored function
    /// (migration 0008, which says what it does) keeps its statements prepared per session: as one
    /// statement of CTEs, building the executor for every call cost more than the work.
    static let usageSQL = """
        SELECT stored, same, version, per_unit, available, response
          FROM credit_charge_usage($1, $2, $3, $4, $5, $6, $7, $8::date, $9, $10)
        """

    /// The calls of a batch in one statement: the arguments of `usageSQL` as arrays (one element
    /// per call; the largest cost once), one row per call in order (migration 0009).
    static let batchSQL = """
        SELECT stored, same, version, per_unit, available, response
          FROM credit_charge_usage_batch($1, $2, $3, $4, $5, $6, $7, $8::text[]::date[], $9, $10)
        """

    /// Whether `units` at the rate in force now can be afforded by the user's balance now.
    public func check(userID: String, units: Int64, rateCode: String, now: Date) async throws -> Affordability {
        try await pool.withConnection { try await check(userID: userID, units: units, rateCode: rateCode, now: now, on: $0) }
    }

    /// The same on the caller's connection.
    public func check(userID: String, units: Int64, rateCode: String, now: Date, on db: PostgresConnection)
        async throws -> Affordability
    {
        let row = try await db.query(
            """
            SELECT r.version, r.micro_credits_per_unit,
                   (SELECT string_agg(pool || ':' || balance, ',') FROM credit_account WHERE user_id = \(userID)) AS balances,
                   credit_subscription_spendable(\(userID)) AS subscription_spendable,
                   EXISTS (SELECT 1 FROM app_user WHERE user_id = \(userID) AND consent_rescinded_at <= \(now)) AS rescinded
              FROM (SELECT 1) AS one
              LEFT JOIN LATERAL (SELECT version, micro_credits_per_unit FROM credit_rate_version
                                  WHERE code = \(rateCode) AND effective_from <= \(now)
                                  ORDER BY effective_from DESC LIMIT 1) r ON true
            """)[0]
        guard let version = try row.decode("version", as: Int?.self),
            let perUnit = try row.decode("micro_credits_per_unit", as: Int64?.self)
        else { throw UsageError.unknownRate(rateCode) }
        guard try !row.decode("rescinded", as: Bool.self) else { throw UsageError.consentRescinded }
        let cost = try Self.cost(units: units, perUnit: perUnit)
        let balances = Self.balances(try row.decode("balances", as: String?.self))
        return Affordability(
            affordable: CreditRules.draw(
                cost, from: balances, subscriptionSpendable: try row.decode("subscription_spendable", as: Bool.self)) != nil, rate: rateCode,
            rateVersion: version,
            cost: CreditAmount.decimal(cost), costMicroCredits: cost, balance: CreditBalance(balances))
    }

    static func cost(units: Int64, perUnit: MicroCredits) throws(UsageError) -> MicroCredits {
        let (cost, overflow) = units.multipliedReportingOverflow(by: perUnit)
        guard !overflow, units > 0, cost > 0, cost <= maximumCost else { throw .costTooLarge }
        return cost
    }

    /// `POOL:balance,…` as the queries aggregate it.
    static func balances(_ text: String?) -> [CreditPool: MicroCredits] {
        var balances: [CreditPool: MicroCredits] = [:]
        for item in (text ?? "").split(separator: ",") {
            let parts = item.split(separator: ":")
            if parts.count == 2, let pool = CreditPool(rawValue: String(parts[0])), let amount = Int64(parts[1]) {
                balances[pool] = amount
            }
        }
        return balances
    }
}

/// A UTC calendar day.
public struct UTCDay: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Days since 1970-01-01.
    public let index: Int64

    public init(index: Int64) { self.index = index }

    public init(containing date: Date) {
        index = Int64((date.timeIntervalSince1970 / 86_400).rounded(.down))
    }

    /// Its first instant, 00:00:00 UTC.
    public var start: Date { Date(timeIntervalSince1970: TimeInterval(index) * 86_400) }
    public var next: UTCDay { UTCDay(index: index + 1) }
    public var previous: UTCDay { UTCDay(index: index - 1) }

    /// `YYYY-MM-DD` (proleptic Gregorian, from the day count: no formatter on the hot path).
    public var text: String {
        let (year, month, day) = CivilCalendar.date(fromDays: index)
        func padded(_ value: Int64, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(padded(year, 4))-\(padded(month, 2))-\(padded(day, 2))"
    }
    public var description: String { text }

    public static func < (lhs: UTCDay, rhs: UTCDay) -> Bool { lhs.index < rhs.index }
}
