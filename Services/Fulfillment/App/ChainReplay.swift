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

    /// Compares every chain (or the chains of `environment`) at `now`.
    public static func mismatches(pool: PostgresPool, now: Date, environment: String? = nil) async throws -> [Mismatch] {
        let chains = try await FulfillmentStore.storedChains(pool: pool, environment: environment)
        var mismatches: [Mismatch] = []
        for chain in chains {
            var facts = ChainFacts()
            for transaction in chain.transactions ?? [] { facts.record(transaction) }
            if let renewal = chain.renewal { facts.record(renewal) }
            let replayed = SubscriptionProjection.project(facts, now: now)
            // The stored row as it stands at `now`: a moment that passed since it was written
            // changes it by the clock alone, whether or not the clock job ran yet.
            var stored = chain.state
            if let next = stored.nextChangeAt, next <= now { stored = stored.advanced(to: now) }
            if replayed != stored {
                mismatches.append(Mismatch(chain: chain.state.historyKey, stored: stored, replayed: replayed))
            }
        }
        return mismatches
    }
}
