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

/// How a usage call ended: its answer, and whether it is the stored first answer of a retried key.
public struct UsageOutcome: Sendable, Hashable {
    public var receipt: UsageReceipt
    /// The answer as stored: sent as is, so a retry gets exactly the same bytes.
    public var json: String
    public var replayed: Bool
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
}

/// Exact decimal text of micro-credits.
public enum CreditAmount {
    /// Micro-credits as an exact decimal string of credits without trailing zeros: 1_500_000 → "1.5".
    public static func decimal(_ micro: MicroCredits) -> String {
        let magnitude = micro.magnitude
        let whole = magnitude / UInt64(Credits.micro)
        let fraction = magnitude % UInt64(Credits.micro)
        var text = String(whole)
        if fraction != 0 {
            let digits = String(fraction)
            let padded = String(repeating: "0", count: 6 - digits.count) + digits
            text += "." + padded.reversed().drop(while: { $0 == "0" }).reversed()
        }
        return micro < 0 ? "-" + text : text
    }
}

/// Real-time metering: usage deducted at once from SUBSCRIPTION, then WELCOME, then PERMANENT,
/// or refused changing nothing; each accepted cost also counts toward the user's open daily bill.
public enum CreditMeter {
    /// The largest cost one call may have (10⁹ credits).
    public static let maximumCost: MicroCredits = 1_000_000_000 * Credits.micro
    /// The largest `units` one call may have.
    public static let maximumUnits: Int64 = 1_000_000_000

    /// Charges a call in its own transaction. A concurrent first use of the same key loses the race
    /// on the unique key and is answered from the winner's stored answer.
    public static func use(_ request: UsageRequest, now: Date, pool: PostgresPool) async throws -> UsageOutcome {
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await pool.transaction { db in try await use(request, now: now, on: db) }
            } catch PostgresError.uniqueViolation(constraint: "credit_usage_event_key", _) where attempt < 3 {
                continue
            }
        }
    }

    /// Charges a call inside the caller's transaction. Throws `UsageError` when refused: the caller
    /// must roll back (the bill was already counted in this transaction).
    public static func use(_ request: UsageRequest, now: Date, on db: PostgresConnection) async throws -> UsageOutcome {
        let occurredAt = request.occurredAt ?? now
        // One statement: the key's first answer, the rate in force, and (for a new key) the cost
        // counted into the open bill, then the accounts locked: bill row first, then accounts, the
        // order the daily close follows too, so a cost is either in a bill before it is closed or in
        // the next day's bill.
        let today = UTCDay(containing: now)
        var counted: (day: UTCDay, balances: [CreditPool: MicroCredits], id: Int64)?
        var version = 0
        var cost: MicroCredits = 0
        for day in [today, today.next] where counted == nil {
            let row = try await db.query(
                """
                WITH existing AS (
                    SELECT response,
                           (user_id = \(request.userID) AND units = \(request.units) AND rate_code = \(request.rateCode)
                            AND requested_at IS NOT DISTINCT FROM \(request.occurredAt)::timestamptz) AS same
                      FROM credit_usage_event WHERE service = \(request.service) AND idempotency_key = \(request.idempotencyKey)
                ), rate AS (
                    SELECT version, micro_credits_per_unit FROM credit_rate_version
                     WHERE code = \(request.rateCode) AND effective_from <= \(occurredAt)
                     ORDER BY effective_from DESC LIMIT 1
                ), bill AS (
                    INSERT INTO credit_daily_bill AS b (user_id, day, total_cost)
                    SELECT u.user_id, \(day.text)::date, \(request.units)::bigint * r.micro_credits_per_unit
                      FROM app_user u CROSS JOIN rate r
                     WHERE u.user_id = \(request.userID) AND NOT EXISTS (SELECT 1 FROM existing)
                       AND \(request.units)::numeric * r.micro_credits_per_unit BETWEEN 1 AND \(Self.maximumCost)
                    ON CONFLICT (user_id, day) DO UPDATE SET total_cost = b.total_cost + EXCLUDED.total_cost
                     WHERE b.closed_at IS NULL
                    RETURNING user_id
                )
                SELECT (SELECT response FROM existing) AS response, (SELECT same FROM existing) AS same,
                       (SELECT version FROM rate) AS version, (SELECT micro_credits_per_unit FROM rate) AS per_unit,
                       (SELECT user_id FROM bill) AS counted,
                       (SELECT string_agg(pool || ':' || balance, ',')
                          FROM (SELECT pool, balance FROM credit_account WHERE user_id = (SELECT user_id FROM bill)
                                 ORDER BY pool FOR UPDATE) a) AS balances,
                       nextval('credit_usage_event_id_seq') AS id
                """)[0]
            if let stored = try row.decode("response", as: String?.self) {
                guard try row.decode("same", as: Bool.self) else { throw UsageError.idempotencyConflict }
                return UsageOutcome(
                    receipt: try JSONDecoder().decode(UsageReceipt.self, from: Data(stored.utf8)), json: stored, replayed: true)
            }
            guard let rateVersion = try row.decode("version", as: Int?.self),
                let perUnit = try row.decode("per_unit", as: Int64?.self)
            else { throw UsageError.unknownRate(request.rateCode) }
            version = rateVersion
            cost = try Self.cost(units: request.units, perUnit: perUnit)
            // Nothing counted: no such user, or that day's bill is closed already (try the next day).
            guard try row.decode("counted", as: String?.self) != nil else { continue }
            counted = (day, Self.balances(try row.decode("balances", as: String?.self)), try row.decode("id"))
        }
        // No bill row means no such user: nothing to draw from.
        let balances = counted?.balances ?? [:]
        guard let counted, let drawn = CreditRules.draw(cost, from: balances) else {
            throw UsageError.creditsExhausted(cost: cost, available: balances.values.reduce(0, +))
        }
        let (day, id) = (counted.day, counted.id)
        var after = balances
        for (pool, amount) in drawn { after[pool, default: 0] -= amount }
        let receipt = UsageReceipt(
            usageId: id, idempotencyKey: request.idempotencyKey, userId: request.userID, units: request.units,
            rate: request.rateCode, rateVersion: version, cost: CreditAmount.decimal(cost), costMicroCredits: cost,
            occurredAt: RFC3339.string(from: occurredAt, fractional: true), billDay: day.text, drawn: PoolAmounts(drawn),
            balance: CreditBalance(after))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let response = String(decoding: try encoder.encode(receipt), as: UTF8.self)
        let pools = drawn.keys.sorted { $0.rawValue < $1.rawValue }
        try await db.query(
            """
            WITH taken AS (
                SELECT * FROM unnest(\(PostgresArray(pools.map(\.rawValue)))::text[],
                                     \(PostgresArray(pools.map { drawn[$0]! }))::bigint[]) AS t(pool, amount)
            ), account AS (
                UPDATE credit_account a SET balance = a.balance - t.amount, updated_at = now()
                  FROM taken t WHERE a.user_id = \(request.userID) AND a.pool = t.pool
                RETURNING a.pool, a.balance, t.amount
            ), event AS (
                INSERT INTO credit_usage_event (
                    id, service, idempotency_key, user_id, units, rate_code, rate_version, cost, requested_at, occurred_at,
                    bill_day, response)
                VALUES (\(id), \(request.service), \(request.idempotencyKey), \(request.userID), \(request.units),
                        \(request.rateCode), \(version), \(cost), \(request.occurredAt), \(occurredAt), \(day.text)::date,
                        \(response))
            )
            INSERT INTO credit_ledger (user_id, pool, delta, balance_after, entry_type, reference)
            SELECT \(request.userID), pool, -amount, balance, 'USAGE', \("usage:\(id)") FROM account ORDER BY pool
            """)
        return UsageOutcome(receipt: receipt, json: response, replayed: false)
    }

    /// Whether `units` at the rate in force now can be afforded by the user's balance now.
    public static func check(userID: String, units: Int64, rateCode: String, now: Date, on db: PostgresConnection)
        async throws -> Affordability
    {
        let row = try await db.query(
            """
            SELECT r.version, r.micro_credits_per_unit,
                   (SELECT string_agg(pool || ':' || balance, ',') FROM credit_account WHERE user_id = \(userID)) AS balances
              FROM (SELECT 1) AS one
              LEFT JOIN LATERAL (SELECT version, micro_credits_per_unit FROM credit_rate_version
                                  WHERE code = \(rateCode) AND effective_from <= \(now)
                                  ORDER BY effective_from DESC LIMIT 1) r ON true
            """)[0]
        guard let version = try row.decode("version", as: Int?.self),
            let perUnit = try row.decode("micro_credits_per_unit", as: Int64?.self)
        else { throw UsageError.unknownRate(rateCode) }
        let cost = try Self.cost(units: units, perUnit: perUnit)
        let balances = Self.balances(try row.decode("balances", as: String?.self))
        return Affordability(
            affordable: CreditRules.draw(cost, from: balances) != nil, rate: rateCode, rateVersion: version,
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
        // Howard Hinnant's civil_from_days.
        let z = index + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func padded(_ value: Int64, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(padded(year, 4))-\(padded(month, 2))-\(padded(day, 2))"
    }
    public var description: String { text }

    public static func < (lhs: UTCDay, rhs: UTCDay) -> Bool { lhs.index < rhs.index }
}
