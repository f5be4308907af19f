import Domain
import Foundation
import Postgres

/// A grant as the user's statement lists it.
public struct CreditGrantEntry: Sendable, Equatable {
    public var id: Int64
    public var grantKey: String
    public var pool: String
    public var amount: MicroCredits
    public var revokedAmount: MicroCredits
    public var reason: String
    public var transactionID: String?
    public var createdAt: Date
}

/// A day's bill as the user's statement lists it.
public struct DailyBillEntry: Sendable, Equatable {
    public var id: Int64
    /// `YYYY-MM-DD`, UTC.
    public var day: String
    /// Days since 1970-01-01: the bill's sort position.
    public var epochDay: Int64
    public var totalCost: MicroCredits
    public var charged: MicroCredits
    public var rounding: MicroCredits
    public var settled: MicroCredits
    public var shortfall: MicroCredits
    public var closedAt: Date?
}

/// What a user reads of their own credits: balances, grants and daily bills, the lists in pages
/// ordered by (position, id) descending. The writes are `Credits`'.
public struct CreditStatementStore: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// The balance of each pool the user has an account in.
    public func balances(userID: String) async throws -> [CreditPool: MicroCredits] {
        var pools: [CreditPool: MicroCredits] = [:]
        for row in try await pool.query("SELECT pool, balance FROM credit_account WHERE user_id = \(userID)") {
            guard let creditPool = CreditPool(rawValue: try row.decode("pool", as: String.self)) else { continue }
            pools[creditPool] = try row.decode("balance", as: Int64.self)
        }
        return pools
    }

    /// Up to `limit` grants, newest first, after the one at (`createdAt`, `id`) when given.
    public func grants(userID: String, after: (createdAt: Date, id: Int64)?, limit: Int) async throws -> [CreditGrantEntry] {
        let rows: PostgresRows
        if let after {
            rows = try await pool.query(
                """
                SELECT id, grant_key, pool, amount, revoked_amount, reason, transaction_id, created_at FROM credit_grant
                WHERE user_id = \(userID) AND (created_at, id) < (\(after.createdAt), \(after.id))
                ORDER BY created_at DESC, id DESC LIMIT \(limit)
                """)
        } else {
            rows = try await pool.query(
                """
                SELECT id, grant_key, pool, amount, revoked_amount, reason, transaction_id, created_at FROM credit_grant
                WHERE user_id = \(userID) ORDER BY created_at DESC, id DESC LIMIT \(limit)
                """)
        }
        return try rows.map { row in
            CreditGrantEntry(
                id: try row.decode("id"), grantKey: try row.decode("grant_key"), pool: try row.decode("pool"),
                amount: try row.decode("amount"), revokedAmount: try row.decode("revoked_amount"), reason: try row.decode("reason"),
                transactionID: try row.decode("transaction_id"), createdAt: try row.decode("created_at"))
        }
    }

    /// Up to `limit` daily bills, latest day first, after the one at (`epochDay`, `id`) when given.
    public func dailyBills(userID: String, after: (epochDay: Int64, id: Int64)?, limit: Int) async throws -> [DailyBillEntry] {
        let rows: PostgresRows
        if let after {
            rows = try await pool.query(
                """
                SELECT id, day::text AS day, day - date '1970-01-01' AS epoch_day, total_cost, charged, rounding, settled,
                    shortfall, closed_at
                FROM credit_daily_bill
                WHERE user_id = \(userID) AND (day, id) < (date '1970-01-01' + \(after.epochDay)::integer, \(after.id))
                ORDER BY day DESC, id DESC LIMIT \(limit)
                """)
        } else {
            rows = try await pool.query(
                """
                SELECT id, day::text AS day, day - date '1970-01-01' AS epoch_day, total_cost, charged, rounding, settled,
                    shortfall, closed_at
                FROM credit_daily_bill WHERE user_id = \(userID) ORDER BY day DESC, id DESC LIMIT \(limit)
                """)
        }
        return try rows.map { row in
            DailyBillEntry(
                id: try row.decode("id"), day: try row.decode("day"), epochDay: try row.decode("epoch_day"),
                totalCost: try row.decode("total_cost"), charged: try row.decode("charged"), rounding: try row.decode("rounding"),
                settled: try row.decode("settled"), shortfall: try row.decode("shortfall"), closedAt: try row.decode("closed_at"))
        }
    }
}

/// Whether the database answers, for readiness checks.
public enum DatabaseProbe {
    public static func check(_ pool: PostgresPool) async throws { try await pool.query("SELECT 1") }
}
