import Dispatch
import Foundation
import ServiceRuntime
import Testing

@testable import Kafka

/// The scheduler alone (pure state, no broker): which message may start, and the offset reached.
@Suite("Partition scheduler")
struct PartitionSchedulerTests {
    private let partition = KafkaTopicPartition(topic: "t", partition: 0)

    private func scheduler(inFlight: Int, _ keys: [String?]) -> PartitionScheduler {
        let scheduler = PartitionScheduler(pauseAt: 1000, resumeAt: 500, maxInFlight: inFlight)
        scheduler.assign([partition])
        for (offset, key) in keys.enumerated() {
            _ = scheduler.enqueue(
                KafkaMessage(topic: "t", partition: 0, offset: Int64(offset), key: key.map { Array($0.utf8) }, value: []))
        }
        return scheduler
    }

    private func stored(_ scheduler: PartitionScheduler) -> Int64? {
        scheduler.offsetsToStore().first { $0.0 == partition }?.1
    }

    @Test func aKeyWaitsForItsEarlierMessageWhileOtherKeysStart() async throws {
        let scheduler = scheduler(inFlight: 4, ["a", "b", "a", "c"])
        let first = try #require(await scheduler.next())
        let second = try #require(await scheduler.next())
        let third = try #require(await scheduler.next())
        // Offset 2 (key a) is passed over while offset 0 (key a) runs.
        #expect([first, second, third].map(\.message.offset) == [0, 1, 3])

        scheduler.complete(second, handled: true)
        #expect(stored(scheduler) == nil)  // offset 0 is still running
        scheduler.complete(first, handled: true)
        #expect(stored(scheduler) == 2)
        let fourth = try #require(await scheduler.next())
        #expect(fourth.message.offset == 2)
        scheduler.complete(third, handled: true)
        #expect(stored(scheduler) == nil)  // unchanged: offset 2 is running
        scheduler.complete(fourth, handled: true)
        #expect(stored(scheduler) == 4)
    }

    @Test func unkeyedMessagesAreOrderedAsOneKey() async throws {
        let scheduler = scheduler(inFlight: 4, [nil, "a", nil])
        let first = try #require(await scheduler.next())
        let second = try #require(await scheduler.next())
        #expect([first, second].map(\.message.offset) == [0, 1])
        let pending = Task { await scheduler.next() }
        scheduler.complete(first, handled: true)
        #expect(await pending.value?.message.offset == 2)
    }

    @Test(arguments: [1, 2])
    func aPartitionStartsNoMoreThanItsInFlightLimit(inFlight: Int) async throws {
        let scheduler = scheduler(inFlight: inFlight, ["a", "b", "c"])
        var running: [PartitionScheduler.Work] = []
        for _ in 0..<inFlight { running.append(try #require(await scheduler.next())) }
        let pending = Task { await scheduler.next() }
        // Only a completion frees a place: the pending worker gets the next offset then.
        scheduler.complete(running[0], handled: true)
        #expect(await pending.value?.message.offset == Int64(inFlight))
        #expect(running.map(\.message.offset) == (0..<Int64(inFlight)).map { $0 })
    }

    @Test func revocationWaitsForEveryRunningHandlerAndReportsTheHandledPrefix() async throws {
        let scheduler = scheduler(inFlight: 4, ["a", "b", "c", "a"])
        let first = try #require(await scheduler.next())
        let second = try #require(await scheduler.next())
        let third = try #require(await scheduler.next())
        scheduler.complete(second, handled: true)

        let revoked = Task.detached { [partition] in
            // Blocks its thread like the poll thread does.
            await withCheckedContinuation { continuation in
                DispatchQueue.global().async { continuation.resume(returning: scheduler.revoke([partition])) }
            }
        }
        #expect(await first.revoked.wait(timeout: .seconds(30)))
        // A handler that gave up on a revoked partition: its message is not handled.
        scheduler.complete(third, handled: false)
        scheduler.complete(first, handled: true)
        let reached = await revoked.value
        // 0 and 1 handled; 2 was not, so the offset stops there (3, queued, was dropped).
        #expect(reached.map(\.processed) == [2])
    }
}
