import Domain
import Foundation
import Postgres

/// Rebuilds subscription rows from the stored facts alone, with the domain projection, and reports
/// every row that differs: the check that `user_subscription` is a function of the facts (after a
/// test suite, after an incident, before trusting a restored backup).
public enum ChainReplay {
    /// One stored row that the facts do not reproduce.
    public struct Mismatch: Sendable, CustomStringConvertible {
        public var chain: String
        public var stored: SubscriptionState
        public var replayed: SubscriptionState?
        public var description: String { "\(chain): stored \(stored), replayed \(replayed.map { "\($0)" } ?? "nothing")" }
    }

    /// Compares every chain (or the chains of `environment`) at `now`. Rows are read in one query;
    /// meant for checks and tools, not for the hot path.
    public static func mismatches(pool: PostgresPool, now: Date, environment: String? = nil) async throws -> [Mismatch] {
        let rows = try await pool.query(
            """
            SELECT json_build_object(
                'state', \(sql: FulfillmentStore.stateJSON),
                'transactions', (SELECT json_agg(\(sql: FulfillmentStore.transactionJSON)) FROM apple_transaction t
                                  WHERE t.environment = s.environment
                                    AND t.original_transaction_id = s.original_transaction_id),
                'renewal', (SELECT \(sql: FulfillmentStore.renewalJSON) FROM apple_renewal_info r
                             WHERE r.environment = s.environment AND r.original_transaction_id = s.original_transaction_id)
            ) AS chain
              FROM user_subscription s
             WHERE \(environment)::text IS NULL OR s.environment = \(environment)
            """)
        var mismatches: [Mismatch] = []
        for row in rows {
            let json: String = try row.decode("chain")
            let chain = try FulfillmentStore.decode(StoredChain.self, json: json)
            var facts = ChainFacts()
            for transaction in chain.transactions ?? [] { facts.record(transaction) }
            if let renewal = chain.renewal { facts.record(renewal) }
            let replayed = SubscriptionProjection.project(facts, now: now)
            if replayed != chain.state {
                mismatches.append(Mismatch(chain: chain.state.historyKey, stored: chain.state, replayed: replayed))
            }
        }
        return mismatches
    }

    private struct StoredChain: Decodable {
        var state: SubscriptionState
        var transactions: [TransactionFact]?
        var renewal: RenewalFact?
    }
}
