import Events
import Foundation
import Pipeline
import ServiceRuntime
import Storage

/// The worker's group commits, as the ingress commits its intake: the events the partitions
/// handle at the same moment are claimed in one statement and applied in one transaction, each
/// caller getting its own result. PostgreSQL's cost is per statement, round trip and commit far
/// more than per row, so a batch of n events costs little more than one.
struct FulfillmentBatches: Sendable {
    /// One claim statement for every waiting envelope.
    let claims: GroupCommit<EventEnvelope, ClaimedEvent?>
    /// One transaction per round of the waiting events (see `rounds`); an event's error is its own.
    let applies: GroupCommit<PendingEvent, Result<ProcessingOutcome, any Error>>

    /// A batch holds at most the events in flight (`FULFILLMENT_CONCURRENCY`, 64 by default), the
    /// batch limit. Two batches in flight: one alone made batches bigger but every event waited for
    /// the batch ahead of its own, and that wait is lost throughput (measured with one event per
    /// partition at a time, 1 worker, 12 partitions: 500 events/s with one, 730 with two).
    init(leases: EventStore, store: FulfillmentStore, owner: String, lease: Duration, logger: Logger) {
        claims = GroupCommit(
            maxBatchSize: 64, maxConcurrentBatches: 2,
            sizeMetric: ("subs_fulfillment_claim_batch_size", "Events claimed per statement")
        ) { envelopes in
            try await leases.claim(envelopes, owner: owner, lease: lease)
        }
        applies = GroupCommit(
            maxBatchSize: 64, maxConcurrentBatches: 2,
            sizeMetric: ("subs_fulfillment_apply_batch_size", "Events handed to one apply batch")
        ) { batch in
            await Self.apply(batch, store: store, owner: owner, logger: logger)
        }
    }

    /// Applies a batch round by round, one transaction each. A round whose transaction fails is
    /// rolled back and its events applied one by one (the single-event path), so one bad event
    /// fails alone and keeps its own retry or burial, and the others still commit.
    static func apply(_ batch: [PendingEvent], store: FulfillmentStore, owner: String, logger: Logger) async
        -> [Result<ProcessingOutcome, any Error>]
    {
        var results = [Result<ProcessingOutcome, any Error>?](repeating: nil, count: batch.count)
        for round in rounds(batch) {
            do {
                let outcomes = try await store.process(round.map { batch[$0] }, owner: owner)
                for (index, outcome) in zip(round, outcomes) { results[index] = .success(outcome) }
            } catch {
                guard round.count > 1 else {
                    results[round[0]] = .failure(error)
                    continue
                }
                logger.warning(
                    "batch transaction failed, applying its events one by one",
                    ["batch.size": .int(Int64(round.count)), "error.type": .string(String(describing: type(of: error)))])
                for index in round {
                    do {
                        results[index] = .success(try await store.process([batch[index]], owner: owner)[0])
                    } catch {
                        results[index] = .failure(error)
                    }
                }
            }
        }
        return results.map { $0! }
    }

    /// Splits a batch (positions) into rounds whose events share no conflict key: an event goes to
    /// the first round after every round holding one of its keys, so the events of a chain (order,
    /// account) are applied in the order they arrived, each reading what the previous one wrote.
    static func rounds(_ batch: [PendingEvent]) -> [[Int]] {
        var rounds: [[Int]] = []
        var lastRound: [String: Int] = [:]
        for (index, pending) in batch.enumerated() {
            let keys = FulfillmentStore.conflictKeys(pending)
            let round = keys.compactMap { lastRound[$0] }.max().map { $0 + 1 } ?? 0
            if round == rounds.count { rounds.append([]) }
            rounds[round].append(index)
            for key in keys { lastRound[key] = round }
        }
        return rounds
    }
}
