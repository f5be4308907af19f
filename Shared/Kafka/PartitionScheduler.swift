import Dispatch
import ServiceRuntime
import Synchronization

/// Hands consumed messages to a fixed set of workers: up to `maxInFlight` messages of a
/// partition at once, never two with the same key, and a message only after every earlier one
/// of its partition with the same key completed; different partitions concurrently, ready
/// partitions in turn.
///
/// Kafka orders a partition for the sake of its keys: handling different keys of one partition
/// concurrently keeps every guarantee a handler can rely on (nil keys count as one key) and lets
/// handlers that batch their work see more of it at once. The offset reached is the contiguous
/// prefix of handled messages, so a restart redelivers everything not yet handled.
///
/// The consumer's poll thread feeds it, revokes partitions and reads the offsets reached;
/// workers take and complete work. Sendable: all state is behind one mutex.
final class PartitionScheduler: Sendable {
    /// One message handed to a worker.
    struct Work: Sendable {
        let message: KafkaMessage
        /// Fires when the partition is revoked or the consumer stops: a retrying handler gives up.
        let revoked: ShutdownTrigger
        fileprivate let slotID: UInt64
    }

    private enum Progress {
        case waiting, running, handled
        /// Revoked before it was handled: it blocks the offset from passing it.
        case dropped
    }

    private struct Entry {
        let message: KafkaMessage
        var progress: Progress = .waiting
    }

    /// An assigned partition. A class so that its entries are mutated in place under the lock.
    private final class Slot {
        let id: UInt64
        let revoked = ShutdownTrigger()
        /// Every message after the last offset reached, in offset order: waiting, running, or
        /// handled but behind an unhandled one. Kept whole (not just the waiting ones) because
        /// the offset reached may only pass a message once it and all before it are handled.
        var entries: ArraySlice<Entry> = []
        var waiting = 0
        var running = 0
        /// Keys of the running messages (nil is the key of unkeyed messages).
        var busyKeys: Set<[UInt8]?> = []
        var inReadyList = false
        /// The offset after the last message queued: anything below it is a re-fetch.
        var nextOffset: Int64?
        /// The offset after the last message of the handled prefix: what may be committed.
        var processed: Int64?
        var stored: Int64?
        var paused = false

        init(id: UInt64) { self.id = id }
    }

    private struct State {
        var slots: [KafkaTopicPartition: Slot] = [:]
        /// Partitions that may have a message to start (checked again when a worker asks).
        var ready: [KafkaTopicPartition] = []
        var idleWorkers: [CheckedContinuation<Work?, Never>] = []
        var nextSlotID: UInt64 = 0
        var closed = false
        /// Revoked partitions whose handlers have not all returned yet.
        var retiring: [KafkaTopicPartition: Slot] = [:]
        var retired: DispatchSemaphore?
    }

    /// Messages held per partition (after its offset reached) at which its fetching is paused,
    /// and at which it resumes.
    let pauseAt: Int
    let resumeAt: Int
    /// Messages of one partition handled at once; 1 is strict offset order.
    let maxInFlight: Int
    /// Waiting messages examined for one that may start: bounds the work done under the lock
    /// when one key fills a partition's queue (later keys then wait for the front to drain).
    private static let lookahead = 256
    private let state = Mutex(State())

    init(pauseAt: Int, resumeAt: Int, maxInFlight: Int = 1) {
        self.pauseAt = pauseAt
        self.resumeAt = resumeAt
        self.maxInFlight = max(1, maxInFlight)
    }

    func assign(_ partitions: [KafkaTopicPartition]) {
        state.withLock { state in
            for partition in partitions where state.slots[partition] == nil {
                state.nextSlotID += 1
                state.slots[partition] = Slot(id: state.nextSlotID)
            }
        }
    }

    var assigned: [KafkaTopicPartition] { state.withLock { Array($0.slots.keys) } }

    /// Whether any assigned partition holds messages not yet handled (queued or running).
    var hasOutstanding: Bool { state.withLock { $0.slots.values.contains { !$0.entries.isEmpty } } }

    /// Queues a message of an assigned partition; true when that partition should now be paused.
    func enqueue(_ message: KafkaMessage) -> Bool {
        let (handoffs, pause) = state.withLock { state -> ([(CheckedContinuation<Work?, Never>, Work)], Bool) in
            guard let slot = state.slots[message.topicPartition] else { return ([], false) }
            // librdkafka fetches again from the last message it returned after a resume.
            if let next = slot.nextOffset, message.offset < next { return ([], false) }
            slot.nextOffset = message.offset + 1
            slot.entries.append(Entry(message: message))
            slot.waiting += 1
            let handoffs = dispatch(slot, message.topicPartition, &state)
            let pause = !slot.paused && slot.entries.count >= pauseAt
            if pause { slot.paused = true }
            return (handoffs, pause)
        }
        for (worker, work) in handoffs { worker.resume(returning: work) }
        return pause
    }

    /// Starts what `slot` may start on idle workers; lines it up for the next free worker if
    /// none is idle. Called whenever a message may have become startable (queued, completed).
    private func dispatch(_ slot: Slot, _ partition: KafkaTopicPartition, _ state: inout State)
        -> [(CheckedContinuation<Work?, Never>, Work)]
    {
        var handoffs: [(CheckedContinuation<Work?, Never>, Work)] = []
        while !state.idleWorkers.isEmpty, let work = start(slot) {
            handoffs.append((state.idleWorkers.popLast()!, work))
        }
        if state.idleWorkers.isEmpty, !slot.inReadyList, slot.waiting > 0, slot.running < maxInFlight {
            slot.inReadyList = true
            state.ready.append(partition)
        }
        return handoffs
    }

    /// Marks running and returns the first waiting message whose key has no running message and
    /// no earlier waiting one; nil when the partition has none or is at its in-flight limit.
    private func start(_ slot: Slot) -> Work? {
        guard slot.waiting > 0, slot.running < maxInFlight else { return nil }
        var blocked = slot.busyKeys
        var examined = 0
        for index in slot.entries.indices where slot.entries[index].progress == .waiting {
            let key = slot.entries[index].message.key
            if blocked.insert(key).inserted {
                slot.entries[index].progress = .running
                slot.waiting -= 1
                slot.running += 1
                slot.busyKeys.insert(key)
                return Work(message: slot.entries[index].message, revoked: slot.revoked, slotID: slot.id)
            }
            examined += 1
            if examined == Self.lookahead { break }
        }
        return nil
    }

    /// The next message to handle; nil once the scheduler is closed.
    func next() async -> Work? {
        await withCheckedContinuation { continuation in
            let work = state.withLock { state -> Work?? in
                // Ready partitions take turns: one that has more to start goes to the back.
                while !state.ready.isEmpty {
                    let partition = state.ready.removeFirst()
                    let slot = state.slots[partition]!
                    guard let work = start(slot) else {
                        slot.inReadyList = false
                        continue
                    }
                    if slot.waiting > 0, slot.running < maxInFlight {
                        state.ready.append(partition)
                    } else {
                        slot.inReadyList = false
                    }
                    return work
                }
                if state.closed { return .some(nil) }
                state.idleWorkers.append(continuation)
                return nil
            }
            if let work { continuation.resume(returning: work) }
        }
    }

    /// Records a worker's outcome (`handled`: the handler returned normally), advances the
    /// offset reached over the handled prefix, and starts what that unblocked.
    func complete(_ work: Work, handled: Bool) {
        let partition = work.message.topicPartition
        let handoffs = state.withLock { state -> [(CheckedContinuation<Work?, Never>, Work)] in
            if let slot = state.slots[partition], slot.id == work.slotID {
                // Not handled while still assigned: it waits again, ahead of its key's later messages.
                finish(work, in: slot, as: handled ? .handled : .waiting)
                return dispatch(slot, partition, &state)
            }
            if let slot = state.retiring[partition], slot.id == work.slotID {
                finish(work, in: slot, as: handled ? .handled : .dropped)
                if !state.retiring.values.contains(where: { $0.running > 0 }) {
                    state.retired?.signal()
                    state.retired = nil
                }
            }
            return []
        }
        for (worker, work) in handoffs { worker.resume(returning: work) }
    }

    private func finish(_ work: Work, in slot: Slot, as progress: Progress) {
        slot.running -= 1
        slot.busyKeys.remove(work.message.key)
        // Running messages lie near the front (within the lookahead), so a scan is short.
        guard let index = slot.entries.firstIndex(where: { $0.message.offset == work.message.offset }) else { return }
        slot.entries[index].progress = progress
        if progress == .waiting { slot.waiting += 1 }
        while let first = slot.entries.first, first.progress == .handled {
            slot.processed = first.message.offset + 1
            slot.entries.removeFirst()
        }
    }

    /// Stops dispatching `partitions` and drops their waiting messages, then BLOCKS the calling
    /// thread (the poll thread) until all their running handlers returned. Reports the offset
    /// each partition reached (nil: nothing handled since it was assigned) and whether it was paused.
    func revoke(_ partitions: [KafkaTopicPartition]) -> [(KafkaTopicPartition, processed: Int64?, paused: Bool)] {
        let retired = DispatchSemaphore(value: 0)
        let (triggers, mustWait) = state.withLock { state -> ([ShutdownTrigger], Bool) in
            var triggers: [ShutdownTrigger] = []
            for partition in partitions {
                guard let slot = state.slots.removeValue(forKey: partition) else { continue }
                if slot.inReadyList { state.ready.removeAll { $0 == partition } }
                // Kept (not removed) so that a handled message behind them cannot move the offset past them.
                for index in slot.entries.indices where slot.entries[index].progress == .waiting {
                    slot.entries[index].progress = .dropped
                }
                slot.waiting = 0
                triggers.append(slot.revoked)
                state.retiring[partition] = slot
            }
            let mustWait = state.retiring.values.contains { $0.running > 0 }
            if mustWait { state.retired = retired }
            return (triggers, mustWait)
        }
        triggers.forEach { $0.fire() }
        if mustWait { retired.wait() }
        return state.withLock { state in
            partitions.compactMap { partition in
                state.retiring.removeValue(forKey: partition).map { (partition, $0.processed, $0.paused) }
            }
        }
    }

    /// Offsets reached since the last call, to hand to `rd_kafka_offsets_store`.
    func offsetsToStore() -> [(KafkaTopicPartition, Int64)] {
        state.withLock { state in
            state.slots.compactMap { partition, slot in
                guard let processed = slot.processed, processed != slot.stored else { return nil }
                slot.stored = processed
                return (partition, processed)
            }
        }
    }

    /// Paused partitions whose held messages have drained enough to fetch again (now marked resumed).
    func partitionsToResume() -> [KafkaTopicPartition] {
        state.withLock { state in
            state.slots.compactMap { partition, slot in
                guard slot.paused, slot.entries.count <= resumeAt else { return nil }
                slot.paused = false
                return partition
            }
        }
    }

    /// Ends the workers' loops once no partition is left.
    func close() {
        let idle = state.withLock { state in
            state.closed = true
            defer { state.idleWorkers = [] }
            return state.idleWorkers
        }
        idle.forEach { $0.resume(returning: nil) }
    }
}
