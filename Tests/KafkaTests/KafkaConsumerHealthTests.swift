import Foundation
import Kafka
import ServiceRuntime
import TestSupport
import Testing

/// The worker's `/healthz` and `/readyz` verdicts (pure), and what a live consumer reports for
/// them and for the consumer-lag gauge.
@Suite("Kafka consumer health and lag")
struct KafkaConsumerHealthTests {
    static let stall = Duration.seconds(60)

    static func health(
        phase: KafkaConsumerHealth.Phase = .running, turn: Duration? = .milliseconds(100), received: Bool = true,
        partitions: Int = 3, backlog: Duration? = nil, progress: Duration? = .seconds(1)
    ) -> KafkaConsumerHealth {
        KafkaConsumerHealth(
            phase: phase, sinceLastTurn: turn, assignmentReceived: received, assignedPartitions: partitions, backlogFor: backlog,
            sinceLastProgress: progress)
    }

    @Test func aPollingMemberWithAnAssignmentIsLiveAndReady() {
        let health = Self.health()
        #expect(health.liveness(stall: Self.stall).ok)
        #expect(health.readiness(stall: Self.stall) == .init(ok: true, reason: "3 partitions assigned"))
    }

    @Test func withoutTheBrokerAMemberIsLiveButNotReadyWhateverItsLastAssignment() {
        var health = Self.health()
        health.brokersDownFor = .seconds(3)
        #expect(health.liveness(stall: Self.stall).ok, "restarting the worker would not bring the broker back")
        #expect(health.readiness(stall: Self.stall) == .init(ok: false, reason: "broker unreachable for 3 s"))
        health.brokersDownFor = nil
        #expect(health.readiness(stall: Self.stall).ok)
    }

    @Test func aStoppingMemberIsNotReadyButStillLive() {
        let stopping = Self.health(phase: .stopping)
        #expect(stopping.readiness(stall: Self.stall) == .init(ok: false, reason: "stopping"))
        #expect(stopping.liveness(stall: Self.stall).ok)
    }

    @Test func anEmptyAssignmentFromTheGroupIsReadyButNoAnswerYetIsNot() {
        #expect(Self.health(partitions: 0).readiness(stall: Self.stall).ok)
        let joining = Self.health(received: false, partitions: 0).readiness(stall: Self.stall)
        #expect(joining == .init(ok: false, reason: "joining the consumer group"))
    }

    @Test func aStalledPollLoopFailsBoth() {
        let stalled = Self.health(turn: .seconds(61))
        #expect(!stalled.liveness(stall: Self.stall).ok)
        #expect(!stalled.readiness(stall: Self.stall).ok)
        #expect(stalled.liveness(stall: Self.stall).reason.contains("has not turned for 61"))
        #expect(!Self.health(phase: .stopped).liveness(stall: Self.stall).ok)
        // Before the loop runs the process is starting: alive, not ready.
        #expect(Self.health(phase: .notStarted, turn: nil).liveness(stall: Self.stall).ok)
        #expect(!Self.health(phase: .notStarted, turn: nil).readiness(stall: Self.stall).ok)
    }

    @Test func aBacklogWithoutProgressBeyondTheBoundIsNotReady() {
        // Idle for an hour, work just arrived: the bound counts from the backlog's start.
        #expect(Self.health(backlog: .seconds(5), progress: .seconds(3600)).readiness(stall: Self.stall).ok)
        // Work for long but handled recently: busy, not stuck.
        #expect(Self.health(backlog: .seconds(600), progress: .seconds(2)).readiness(stall: Self.stall).ok)
        let stuck = Self.health(backlog: .seconds(90), progress: .seconds(120)).readiness(stall: Self.stall)
        #expect(stuck == .init(ok: false, reason: "partitions hold work and nothing was handled for 90 s"))
        // Stuck handling does not make the process dead: its loop still turns.
        #expect(Self.health(backlog: .seconds(90), progress: .seconds(120)).liveness(stall: Self.stall).ok)
    }

    @Test func aLiveConsumerBecomesReadyAndItsGroupLagFollowsCommits() async throws {
        let topic = try await makeTopic(partitions: 2)
        let group = TestEnvironment.uniqueName("g")
        let producer = try KafkaProducer(configuration: try kafkaConfiguration(), logger: testLogger)
        for index in 0..<6 {
            _ = try await producer.send(topic: topic, key: Array("key-\(index)".utf8), value: [UInt8(index)])
        }
        await producer.shutdown()

        let release = ShutdownTrigger()
        let handled = Locked(0)
        let consumer = try makeConsumer(topic: topic, group: group) { _ in
            await release.wait()
            handled.withLock { $0 += 1 }
        }
        #expect(consumer.health.phase == .notStarted)
        // Nothing committed yet: the whole topic is the lag, partition by partition.
        let before = try await consumer.groupLag()
        #expect(before.count == 2 && before.allSatisfy { $0.committed == nil })
        #expect(before.reduce(0) { $0 + $1.lag } == 6)

        let running = Running(consumer)
        // Ready comes with the group's join; the assignment a moment later (seen 0 under load).
        #expect(await eventually { consumer.health.readiness(stall: .seconds(60)).ok && consumer.health.assignedPartitions == 2 })
        #expect(consumer.health.assignedPartitions == 2)
        // Handlers held: the member sees the backlog it cannot drain.
        #expect(await eventually { (consumer.health.backlogFor ?? .zero) > .milliseconds(1500) })
        let stuck = consumer.health.readiness(stall: .seconds(1))
        #expect(!stuck.ok && stuck.reason.contains("hold work"), "\(stuck)")

        release.fire()
        #expect(await eventually { handled.value == 6 })
        // Offsets are committed every second: the lag reaches zero without the consumer stopping.
        #expect(try await eventually { try await consumer.groupLag().allSatisfy { $0.lag == 0 } })
        #expect(await eventually { consumer.health.backlogFor == nil })
        try await running.stop()
        #expect(consumer.health.phase == .stopped && !consumer.health.liveness(stall: .seconds(60)).ok)
    }
}
