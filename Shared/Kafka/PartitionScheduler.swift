import Dispatch
import ServiceRuntime
import Synchronization

/// Hands consumed messages to a fixed set of workers: each partition's messages one at a time
/// and in offset order, different partitions concurrently, ready partitions in turn.
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

    /// An assigned partition. A class so that the queue is mutated in place under the lock.
    private final class Slot {
        let id: UInt64
        let revoked = ShutdownTrigger()
        /// Messages not yet handled; the first one is in a worker's hands while `busy`.
        var queue: ArraySlice<KafkaMessage> = []
        var busy = false
        var inReadyList = false
        /// The offset after the last message queued: anything below it is a re-fetch.
        var nextOffset: Int64?
        /// The offset after the last message handled: what may be committed.
        var processed: Int64?
        var stored: Int64?
        var paused = false

        init(id: UInt64) { self.id = id }
        var head: KafkaMessage { queue.first! }
    }

    private struct State {
        var slots: [KafkaTopicPartition: Slot] = [:]
        var ready: [KafkaTopicPartition] = []
        var idleWorkers: [CheckedContinuation<Work?, Never>] = []
        var nextSlotID: UInt64 = 0
        var closed = false
        /// Revoked partitions whose handler has not returned yet.
        var retiring: [KafkaTopicPartition: Slot] = [:]
        var retired: DispatchSemaphore?
    }

    /// Queue length at which a partition's fetching is paused, and at which it resumes.
    let pauseAt: Int
    let resumeAt: Int
    private let state = Mutex(State())

    init(pauseAt: Int, resumeAt: Int) {
        self.pauseAt = pauseAt
        self.resumeAt = resumeAt
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

    /// Queues a message of an assigned partition; true when that partition should now be paused.
    func enqueue(_ message: KafkaMessage) -> Bool {
        let (handoff, pause) = state.withLock { state -> ((CheckedContinuation<Work?, Never>, Work)?, Bool) in
            guard let slot = state.slots[message.topicPartition] else { return (nil, false) }
            // librdkafka fetches again from the last message it returned after a resume.
            if let next = slot.nextOffset, message.offset < next { return (nil, false) }
            slot.nextOffset = message.offset + 1
            slot.queue.append(message)
            let handoff = slot.busy || slot.inReadyList ? nil : Self.schedule(slot, message.topicPartition, &state)
            let pause = !slot.paused && slot.queue.count >= pauseAt
            if pause { slot.paused = true }
            return (handoff, pause)
        }
        if let (worker, work) = handoff { worker.resume(returning: work) }
        return pause
    }

    /// Gives an idle partition with queued messages to an idle worker, or lines it up.
    private static func schedule(_ slot: Slot, _ partition: KafkaTopicPartition, _ state: inout State)
        -> (CheckedContinuation<Work?, Never>, Work)?
    {
        guard let worker = state.idleWorkers.popLast() else {
            slot.inReadyList = true
            state.ready.append(partition)
            return nil
        }
        slot.busy = true
        return (worker, Work(message: slot.head, revoked: slot.revoked, slotID: slot.id))
    }

    /// The next message to handle; nil once the scheduler is closed.
    func next() async -> Work? {
        await withCheckedContinuation { continuation in
            let work = state.withLock { state -> Work?? in
                if !state.ready.isEmpty {
                    let slot = state.slots[state.ready.removeFirst()]!
                    slot.inReadyList = false
                    slot.busy = true
                    return Work(message: slot.head, revoked: slot.revoked, slotID: slot.id)
                }
                if state.closed { return .some(nil) }
                state.idleWorkers.append(continuation)
                return nil
            }
            if let work { continuation.resume(returning: work) }
        }
    }

    /// Records a worker's outcome (`handled`: the handler returned normally) and lines up the
    /// partition's next message.
    func complete(_ work: Work, handled: Bool) {
        let partition = work.message.topicPartition
        let handoff = state.withLock { state -> (CheckedContinuation<Work?, Never>, Work)? in
            if let slot = state.slots[partition], slot.id == work.slotID {
                slot.busy = false
                if handled {
                    slot.queue.removeFirst()
                    slot.processed = work.message.offset + 1
                }
                return slot.queue.isEmpty ? nil : Self.schedule(slot, partition, &state)
            }
            if let slot = state.retiring[partition], slot.id == work.slotID {
                slot.busy = false
                if handled { slot.processed = work.message.offset + 1 }
                if !state.retiring.values.contains(where: \.busy) {
                    state.retired?.signal()
                    state.retired = nil
                }
            }
            return nil
        }
        if let (worker, work) = handoff { worker.resume(returning: work) }
    }

    /// Stops dispatching `partitions` and drops their queued messages, then BLOCKS the calling
    /// thread (the poll thread) until their running handlers returned. Reports the offset each
    /// partition reached (nil: nothing handled since it was assigned) and whether it was paused.
    func revoke(_ partitions: [KafkaTopicPartition]) -> [(KafkaTopicPartition, processed: Int64?, paused: Bool)] {
        let retired = DispatchSemaphore(value: 0)
        let (triggers, mustWait) = state.withLock { state -> ([ShutdownTrigger], Bool) in
            var triggers: [ShutdownTrigger] = []
            for partition in partitions {
                guard let slot = state.slots.removeValue(forKey: partition) else { continue }
                if slot.inReadyList { state.ready.removeAll { $0 == partition } }
                slot.queue = []
                triggers.append(slot.revoked)
                state.retiring[partition] = slot
            }
            let mustWait = state.retiring.values.contains(where: \.busy)
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

    /// Paused partitions whose queue has drained enough to fetch again (now marked resumed).
    func partitionsToResume() -> [KafkaTopicPartition] {
        state.withLock { state in
            state.slots.compactMap { partition, slot in
                guard slot.paused, slot.queue.count <= resumeAt else { return nil }
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
