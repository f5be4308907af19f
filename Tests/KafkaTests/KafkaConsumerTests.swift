import Foundation
import Kafka
import ServiceRuntime
import TestSupport
import Testing

@Suite("Kafka consumer")
struct KafkaConsumerTests {
    /// Sends `count` messages whose keys spread them over the topic's partitions.
    private func produce(_ count: Int, to topic: String, from start: Int = 0) async throws -> [KafkaDeliveryReport] {
        let producer = try KafkaProducer(configuration: try kafkaConfiguration(), logger: testLogger)
        let reports = try await withThrowingTaskGroup(of: KafkaDeliveryReport.self) { group in
            for index in start..<(start + count) {
                group.addTask { try await producer.send(topic: topic, key: Array("k\(index)".utf8), value: [UInt8(index % 256)]) }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        await producer.shutdown()
        return reports
    }

    /// Both rebalance protocols: eager (the default assignors) and cooperative (incremental).
    @Test(arguments: ["range,roundrobin", "cooperative-sticky"])
    func membersSplitPartitionsAndAThirdMemberGetsItsShare(assignor: String) async throws {
        let properties = ["partition.assignment.strategy": assignor]
        let topic = try await makeTopic(partitions: 6)
        let group = TestEnvironment.uniqueName("g")
        let everything = Set((0..<6).map { KafkaTopicPartition(topic: topic, partition: $0) })
        func balanced(_ members: [Running<KafkaConsumer>]) -> Bool {
            let assignments = members.map { Set($0.service.assignment) }
            return assignments.allSatisfy { !$0.isEmpty }
                && assignments.reduce(0) { $0 + $1.count } == everything.count
                && assignments.reduce(into: Set()) { $0.formUnion($1) } == everything
        }

        let started = ContinuousClock.now
        let first = Running(try makeConsumer(topic: topic, group: group, properties: properties) { _ in })
        let second = Running(try makeConsumer(topic: topic, group: group, properties: properties) { _ in })
        let pairBalanced = await eventually { balanced([first, second]) }
        print("[\(assignor)] two members share 6 partitions \(seconds(since: started)) after starting")
        #expect(pairBalanced)

        let joined = ContinuousClock.now
        let third = Running(try makeConsumer(topic: topic, group: group, properties: properties) { _ in })
        // A cooperative rebalance passes through covered but uneven states: wait for 2 each.
        let trio = [first, second, third]
        let trioBalanced = await eventually { balanced(trio) && trio.allSatisfy { $0.service.assignment.count == 2 } }
        print("[\(assignor)] third member has its share \(seconds(since: joined)) after joining")
        #expect(trioBalanced)

        let leaving = ContinuousClock.now
        try await third.stop()
        let handedBack = await eventually { balanced([first, second]) }
        print("[\(assignor)] partitions of a member that left cleanly reassigned \(seconds(since: leaving)) after it stopped")
        #expect(handedBack)
        try await first.stop()
        try await second.stop()
    }

    @Test func committedOffsetsSurviveARestart() async throws {
        let topic = try await makeTopic(partitions: 1)
        let group = TestEnvironment.uniqueName("g")
        _ = try await produce(10, to: topic)

        // The first member handles offsets 0...5 and fails on 6 until it is stopped.
        let handled = Locked<[Int64]>([])
        let attemptedSix = Locked(false)
        let first = Running(
            try makeConsumer(topic: topic, group: group, retryBackoff: .milliseconds(50)) { message in
                if message.offset >= 6 {
                    attemptedSix.withLock { $0 = true }
                    throw TestFailure()
                }
                handled.withLock { $0.append(message.offset) }
            })
        #expect(await eventually { attemptedSix.value })
        try await first.stop()
        #expect(handled.value == [0, 1, 2, 3, 4, 5])

        let redelivered = Locked<[Int64]>([])
        let second = Running(
            try makeConsumer(topic: topic, group: group) { message in redelivered.withLock { $0.append(message.offset) } })
        #expect(await eventually { redelivered.value.count >= 4 })
        try await second.stop()
        #expect(redelivered.value == [6, 7, 8, 9])
    }

    @Test func aThrowingHandlerGetsTheSameMessageAgain() async throws {
        let topic = try await makeTopic(partitions: 1)
        _ = try await produce(3, to: topic)
        let attempts = Locked<[Int64]>([])
        let consumer = Running(
            try makeConsumer(topic: topic, group: TestEnvironment.uniqueName("g"), retryBackoff: .milliseconds(20)) {
                message in
                let failuresSoFar = attempts.withLock { attempts in
                    attempts.append(message.offset)
                    return attempts.count - 1
                }
                if message.offset == 0, failuresSoFar < 2 { throw TestFailure() }
            })
        #expect(await eventually { attempts.value.count >= 5 })
        try await consumer.stop()
        #expect(attempts.value == [0, 0, 0, 1, 2])
    }

    @Test func pausingASlowPartitionLosesAndRepeatsNothing() async throws {
        let topic = try await makeTopic(partitions: 1)
        let total = 200
        _ = try await produce(total, to: topic)
        // A buffer of 50 makes fetching pause and resume several times over 200 messages.
        let handled = Locked<[Int64]>([])
        let consumer = Running(
            try makeConsumer(topic: topic, group: TestEnvironment.uniqueName("g"), buffered: 50) { message in
                try await Task.sleep(for: .milliseconds(1))
                handled.withLock { $0.append(message.offset) }
            })
        let complete = await eventually { handled.value.count >= total }
        try await consumer.stop()
        #expect(complete)
        #expect(handled.value == (0..<Int64(total)).map { $0 })
    }

    @Test func noMessageIsHandledTwiceAcrossARebalance() async throws {
        let topic = try await makeTopic(partitions: 4)
        let group = TestEnvironment.uniqueName("g")
        let total = 400
        _ = try await produce(total, to: topic)

        // Slow handlers, so partitions are mid-stream when the second member joins.
        let handled = Locked<[String: Int]>([:])
        let handler: @Sendable (KafkaMessage) async throws -> Void = { message in
            try await Task.sleep(for: .milliseconds(10))
            handled.withLock { $0["\(message.partition)/\(message.offset)", default: 0] += 1 }
        }
        let first = Running(try makeConsumer(topic: topic, group: group, handler: handler))
        #expect(await eventually { handled.value.count >= 40 })
        let second = Running(try makeConsumer(topic: topic, group: group, handler: handler))
        #expect(await eventually { !second.service.assignment.isEmpty })
        let complete = await eventually { handled.value.count == total }
        try await first.stop()
        try await second.stop()

        #expect(complete)
        let duplicates = handled.value.filter { $0.value > 1 }
        #expect(duplicates.isEmpty, "handled more than once: \(duplicates.keys.sorted().prefix(10))")
    }

    // MARK: Several messages of a partition in flight.

    /// Sends `keys[i]` as the i-th message of a one-partition topic, one after the other.
    private func produceInOrder(_ keys: [String], to topic: String) async throws {
        let producer = try KafkaProducer(configuration: try kafkaConfiguration(), logger: testLogger)
        for key in keys { _ = try await producer.send(topic: topic, key: Array(key.utf8), value: []) }
        await producer.shutdown()
    }

    @Test func sameKeyMessagesRunInOrderAndAloneWhileOtherKeysOfThePartitionRunTogether() async throws {
        let topic = try await makeTopic(partitions: 1)
        let keys = (0..<60).map { "k\($0 % 4)" }
        try await produceInOrder(keys, to: topic)

        struct Log {
            var running: [String: Int64] = [:]
            var overlaps: [String] = []
            var handled: [String: [Int64]] = [:]
            /// Another key started while offset 0 was running: recorded by that handler, so
            /// the first one cannot miss it however briefly the other ran.
            var otherKeyStartedDuringFirst = false
            var othersSeenByFirst = false
        }
        let firstKey = keys[0]
        let log = Locked(Log())
        let consumer = Running(
            try makeConsumer(topic: topic, group: TestEnvironment.uniqueName("g"), inFlight: 8) { message in
                let key = String(decoding: message.key ?? [], as: UTF8.self)
                log.withLock { log in
                    if let other = log.running[key] { log.overlaps.append("\(key): \(other) and \(message.offset)") }
                    if key != firstKey, log.running[firstKey] == 0 { log.otherKeyStartedDuringFirst = true }
                    log.running[key] = message.offset
                }
                if message.offset == 0 {
                    // Holds the first message until another key of the partition started while
                    // it runs (with one message at a time this never happens); the bound only
                    // ends a failing run, however busy the machine.
                    let others = await eventually(timeout: 30, every: .milliseconds(5)) { log.value.otherKeyStartedDuringFirst }
                    log.withLock { $0.othersSeenByFirst = others }
                } else {
                    try await Task.sleep(for: .milliseconds(2))
                }
                log.withLock { log in
                    log.running[key] = nil
                    log.handled[key, default: []].append(message.offset)
                }
            })
        let complete = await eventually { log.value.handled.values.reduce(0) { $0 + $1.count } >= keys.count }
        try await consumer.stop()

        #expect(complete)
        #expect(log.value.othersSeenByFirst)
        #expect(log.value.overlaps.isEmpty, "same key in flight twice: \(log.value.overlaps.prefix(5))")
        for (key, offsets) in log.value.handled {
            let expected = keys.indices.filter { keys[$0] == key }.map(Int64.init)
            #expect(offsets == expected, "key \(key)")
        }
    }

    @Test func theCommittedOffsetStopsAtAMessageNotYetHandled() async throws {
        let topic = try await makeTopic(partitions: 1)
        let group = TestEnvironment.uniqueName("g")
        try await produceInOrder((0..<10).map { "k\($0)" }, to: topic)

        // Offset 2 fails until the member stops; the later ones are handled meanwhile.
        let handled = Locked<Set<Int64>>([])
        let first = Running(
            try makeConsumer(topic: topic, group: group, retryBackoff: .milliseconds(50), inFlight: 4) { message in
                if message.offset == 2 { throw TestFailure() }
                handled.withLock { _ = $0.insert(message.offset) }
            })
        let laterHandled = await eventually { handled.value == Set(0..<10).subtracting([2]) }
        try await first.stop()
        #expect(laterHandled)

        let redelivered = Locked<[Int64]>([])
        let second = Running(
            try makeConsumer(topic: topic, group: group) { message in redelivered.withLock { $0.append(message.offset) } })
        #expect(await eventually { redelivered.value.count >= 8 })
        try await second.stop()
        #expect(redelivered.value == Array(2..<10))
    }

    @Test func stoppingWaitsForEveryMessageInFlightAndCommitsThem() async throws {
        let topic = try await makeTopic(partitions: 1)
        let group = TestEnvironment.uniqueName("g")
        try await produceInOrder((0..<10).map { "k\($0)" }, to: topic)

        let gate = ShutdownTrigger()
        let started = Locked(0)
        let finished = Locked(0)
        let first = Running(
            try makeConsumer(topic: topic, group: group, inFlight: 4) { _ in
                started.withLock { $0 += 1 }
                await gate.wait()
                finished.withLock { $0 += 1 }
            })
        #expect(await eventually { started.value == 4 })
        let stopping = Task {
            try await first.stop()
            return (started.value, finished.value)
        }
        gate.fire()
        // Every handler that started had returned when the member left (and queued messages
        // may have started in between): what it handled is a prefix of the partition.
        let (startedBeforeStop, finishedBeforeStop) = try await stopping.value
        #expect(finishedBeforeStop == startedBeforeStop)
        #expect(startedBeforeStop >= 4)

        // The next member resumes right after that prefix: nothing handled twice, nothing lost.
        let redelivered = Locked<[Int64]>([])
        let second = Running(
            try makeConsumer(topic: topic, group: group) { message in redelivered.withLock { $0.append(message.offset) } })
        #expect(await eventually { redelivered.value.count >= 10 - startedBeforeStop })
        try await second.stop()
        #expect(redelivered.value == Array(Int64(startedBeforeStop)..<10))
    }
}

struct TestFailure: Error {}
