import ServiceRuntime
import Synchronization

/// Gathers concurrent requests into batches that one database transaction commits together.
///
/// PostgreSQL pays one WAL flush per commit; carrying many rows per commit lifts the ingress past
/// the one-row-per-commit ceiling while every caller still returns only after its own row is
/// durable. Up to `maxConcurrentBatches` batches are in flight; while they commit, new requests
/// queue up and form the next batch, so batches grow with the load and stay small when idle.
public final class GroupCommit<Item: Sendable, Output: Sendable>: Sendable {
    public typealias Commit = @Sendable ([Item]) async throws -> [Output]

    private struct Pending {
        var item: Item
        var continuation: CheckedContinuation<Output, any Error>
    }
    private struct State {
        var queue: [Pending] = []
        var activeBatches = 0
    }
    private let state = Mutex(State())
    private let maxBatchSize: Int
    private let maxConcurrentBatches: Int
    private let commit: Commit
    private let batchSizes: Histogram

    /// `commit` must return one output per item, in order, or throw for the whole batch.
    /// `sizeMetric` names the histogram of batch sizes (one name per kind of batch).
    public init(
        maxBatchSize: Int = 64, maxConcurrentBatches: Int = 4,
        sizeMetric: (name: String, help: String) = ("subs_group_commit_batch_size", "Items committed per transaction"),
        commit: @escaping Commit
    ) {
        precondition(maxBatchSize > 0 && maxConcurrentBatches > 0)
        self.maxBatchSize = maxBatchSize
        self.maxConcurrentBatches = maxConcurrentBatches
        self.commit = commit
        batchSizes = MetricsRegistry.shared.histogram(
            sizeMetric.name, help: sizeMetric.help, buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512])
    }

    /// Returns once the batch holding `item` committed (or throws its error).
    public func submit(_ item: Item) async throws -> Output {
        try await withCheckedThrowingContinuation { continuation in
            let startBatch = state.withLock { s -> Bool in
                s.queue.append(Pending(item: item, continuation: continuation))
                guard s.activeBatches < maxConcurrentBatches else { return false }
                s.activeBatches += 1
                return true
            }
            if startBatch { Task { await self.drain() } }
        }
    }

    private func drain() async {
        while true {
            let batch = state.withLock { s -> [Pending] in
                let batch = Array(s.queue.prefix(maxBatchSize))
                s.queue.removeFirst(batch.count)
                if batch.isEmpty { s.activeBatches -= 1 }
                return batch
            }
            if batch.isEmpty { return }
            batchSizes.observe(Double(batch.count))
            do {
                let outputs = try await commit(batch.map(\.item))
                precondition(outputs.count == batch.count, "a group commit returns one output per item")
                for (pending, output) in zip(batch, outputs) { pending.continuation.resume(returning: output) }
            } catch {
                for pending in batch { pending.continuation.resume(throwing: error) }
            }
        }
    }
}
