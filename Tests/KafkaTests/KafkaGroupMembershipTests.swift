import Foundation
import ServiceRuntime
import TestSupport
import Testing

@testable import Kafka

/// Issue 26: group membership chosen for fail-over in seconds.
@Suite("Kafka group membership")
struct KafkaGroupMembershipTests {
    @Test func consumersRebalanceCooperativelyAndStaticMembershipIsOptIn() {
        let configuration = KafkaConfiguration(brokers: "broker:9092")
        let dynamic = configuration.librdkafkaProperties(for: .consumer(groupID: "g", instanceID: nil))
        #expect(dynamic["partition.assignment.strategy"] == "cooperative-sticky")
        #expect(dynamic["group.instance.id"] == nil)
        let session = Int(dynamic["session.timeout.ms"] ?? "") ?? 0
        let heartbeat = Int(dynamic["heartbeat.interval.ms"] ?? "") ?? 0
        #expect(session > 0 && session <= 10_000, "a dead member's partitions move within seconds")
        #expect(heartbeat > 0 && heartbeat * 3 <= session, "several heartbeats per session")
        let member = configuration.librdkafkaProperties(for: .consumer(groupID: "g", instanceID: "fulfillment-7d9f-x2k"))
        #expect(member["group.instance.id"] == "fulfillment-7d9f-x2k")
        // A broker's quirks come in through the properties, over the product's choices.
        let tuned = KafkaConfiguration(brokers: "broker:9092", properties: ["session.timeout.ms": "6000"])
        #expect(tuned.librdkafkaProperties(for: .consumer(groupID: "g", instanceID: nil))["session.timeout.ms"] == "6000")
        #expect(configuration.librdkafkaProperties(for: .producer)["partition.assignment.strategy"] == nil)
    }

    /// With the shipped assignor a member joining takes its share while the first keeps working
    /// on the partitions it keeps: the first's assignment never drops to nothing (an eager
    /// rebalance revokes everything first, which stopped every partition of the group for 82 s).
    @Test func aJoiningMemberStopsOnlyThePartitionsThatMove() async throws {
        let topic = try await makeTopic(partitions: 6)
        let group = TestEnvironment.uniqueName("g")
        let history = Locked<[[KafkaTopicPartition]]>([])
        let firstConsumer = try makeConsumer(topic: topic, group: group) { _ in }
        firstConsumer.onAssignmentChange { assigned in history.withLock { $0.append(assigned) } }
        let first = Running(firstConsumer)
        #expect(await eventually(timeout: 60) { first.service.assignment.count == 6 })
        let second = Running(try makeConsumer(topic: topic, group: group) { _ in })
        let shared = await eventually(timeout: 60) {
            first.service.assignment.count == 3 && second.service.assignment.count == 3
        }
        #expect(shared, "\(first.service.assignment.count) + \(second.service.assignment.count)")
        let afterFull = history.value.drop { $0.count < 6 }
        #expect(!afterFull.contains { $0.isEmpty }, "the first member stopped everything: \(history.value.map(\.count))")
        #expect(Set(afterFull.last ?? []).isSubset(of: Set(afterFull.first ?? [])), "it kept partitions it had")
        try await second.stop()
        try await first.stop()
    }
}
