import Domain
import Foundation
import Postgres

/// How a user proved the purchase they import (`subscription_import.source`).
public enum ImportSource: String, Sendable, StoredStatus {
    /// A StoreKit 2 signed transaction (`Transaction.currentEntitlements`).
    case signedTransaction = "SIGNED_TRANSACTION"
    /// A StoreKit 1 app receipt.
    case appReceipt = "APP_RECEIPT"
}

/// Where an import stands as its user sees it.
public enum ImportStatus: String, Sendable, Codable {
    /// Apple not asked yet, or its facts not all applied yet.
    case pending = "PENDING"
    /// Every fact Apple returned is applied.
    case completed = "COMPLETED"
    /// A chain is another user's: its facts went to its owner, nothing was bound to the caller.
    case accountConflict = "ACCOUNT_CONFLICT"
    case failed = "FAILED"
}

/// A chain of an import, as its user sees it.
public struct ImportedChain: Sendable, Codable, Equatable {
    public var originalTransactionId: String
    public var subscriptionStatus: String?
    public var activeProductId: String?
    public var expiresAt: Date?
}

/// An import as its user reads it.
public struct ImportState: Sendable {
    public var importID: Int64
    public var status: ImportStatus
    public var errorCode: String?
    /// The imported chains the user owns.
    public var chains: [ImportedChain]
    /// Micro-credits over all of the user's pools.
    public var balance: MicroCredits
}

/// What a worker needs to run an import.
public struct ImportJob: Sendable {
    public var userID: String
    public var environment: String
    public var lookupTransactionID: String
}

/// The SQL of `subscription_import`: a user's request, the worker's progress, and what the user
/// reads back. The facts themselves travel as events; the chains are bound through `ChainBindingStore`.
public struct ImportStore: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Records the import and its task, or returns the existing one of this user and proof (asked
    /// again after a failure, it runs again). Returns the import id.
    public func request(userID: String, environment: String, source: ImportSource, lookupTransactionID: String)
        async throws -> Int64
    {
        try await pool.transaction { db in
            try await UserStore.ensureUser(userID, on: db)
            let row = try await db.query(
                """
                INSERT INTO subscription_import (user_id, environment, source, lookup_transaction_id)
                VALUES (\(userID), \(environment), \(source), \(lookupTransactionID))
                ON CONFLICT (user_id, environment, lookup_transaction_id) DO UPDATE
                   SET status = CASE WHEN subscription_import.status = 'FAILED' THEN 'PENDING' ELSE subscription_import.status END,
                       error_code = CASE WHEN subscription_import.status = 'FAILED' THEN NULL ELSE subscription_import.error_code END,
                       updated_at = now()
                RETURNING id, status
                """
            ).single()
            let id: Int64 = try row.decode("id")
            if try row.decode("status", as: String.self) == "PENDING" {
                try await TaskStore.requestImport(importID: id, environment: environment, requestedBy: userID, on: db)
            }
            return id
        }
    }

    /// The import a worker runs; nil when it is gone.
    public func job(_ id: Int64) async throws -> ImportJob? {
        guard
            let row = try await pool.query(
                "SELECT user_id, environment, lookup_transaction_id FROM subscription_import WHERE id = \(id)"
            ).first
        else { return nil }
        return ImportJob(
            userID: try row.decode("user_id"), environment: try row.decode("environment"),
            lookupTransactionID: try row.decode("lookup_transaction_id"))
    }

    /// Records what the worker stored: the chains and the events that carry their facts.
    public func recordFetched(_ id: Int64, originalTransactionIDs: [String], eventIDs: [Int64], conflict: Bool) async throws {
        try await pool.query(
            """
            UPDATE subscription_import
               SET status = \(conflict ? "ACCOUNT_CONFLICT" : "FETCHED"),
                   original_transaction_ids = \(PostgresArray(originalTransactionIDs))::text[],
                   event_ids = \(PostgresArray(eventIDs))::bigint[], error_code = NULL, updated_at = now()
             WHERE id = \(id)
            """)
    }

    public func fail(_ id: Int64, code: String) async throws {
        try await pool.query(
            "UPDATE subscription_import SET status = 'FAILED', error_code = \(code), updated_at = now() WHERE id = \(id)")
    }

    /// The import as `userID` sees it; nil when it is not theirs. COMPLETED once every event that
    /// carries its facts is applied (or refused).
    public func state(_ id: Int64, userID: String) async throws -> ImportState? {
        guard
            let row = try await pool.query(
                """
                SELECT i.status, i.error_code, i.original_transaction_ids, i.environment,
                       (SELECT count(*) FROM inbound_event e
                         WHERE e.id = ANY(i.event_ids) AND e.process_status NOT IN ('SUCCEEDED', 'DEAD')) AS open_events,
                       (SELECT least(coalesce(sum(balance), 0), 9223372036854775807)::bigint FROM credit_account WHERE user_id = i.user_id) AS balance,
                       (SELECT json_agg(json_build_object(
                                 'originalTransactionId', s.original_transaction_id, 'subscriptionStatus', s.status,
                                 'activeProductId', s.active_product_id,
                                 'expiresAt', (extract(epoch FROM s.expires_at) * 1000)::bigint)
                                 ORDER BY s.original_transaction_id)::text
                          FROM user_subscription s
                         WHERE s.environment = i.environment AND s.original_transaction_id = ANY(i.original_transaction_ids)
                           AND s.user_id = i.user_id) AS chains
                  FROM subscription_import i WHERE i.id = \(id) AND i.user_id = \(userID)
                """
            ).first
        else { return nil }
        let stored: String = try row.decode("status")
        let status: ImportStatus
        switch stored {
        case "FAILED": status = .failed
        case "ACCOUNT_CONFLICT": status = .accountConflict
        case "FETCHED": status = try row.decode("open_events", as: Int64.self) == 0 ? .completed : .pending
        default: status = .pending
        }
        struct Chain: Decodable {
            var originalTransactionId: String
            var subscriptionStatus: String?
            var activeProductId: String?
            var expiresAt: Int64?
        }
        let chains =
            try (try row.decode("chains", as: String?.self)).map {
                try JSONDecoder().decode([Chain].self, from: Data($0.utf8))
            } ?? []
        return ImportState(
            importID: id, status: status, errorCode: try row.decode("error_code", as: String?.self),
            chains: chains.map {
                ImportedChain(
                    originalTransactionId: $0.originalTransactionId, subscriptionStatus: $0.subscriptionStatus,
                    activeProductId: $0.activeProductId,
                    expiresAt: $0.expiresAt.map { Date(timeIntervalSince1970: Double($0) / 1000) })
            },
            balance: try row.decode("balance"))
    }
}
