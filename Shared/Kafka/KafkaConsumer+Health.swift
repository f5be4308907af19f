import Dispatch
import ServiceRuntime
import Synchronization

/// What a consumer's health endpoints decide from: read from the consumer (`health`) or built by
/// hand in tests. Durations are nil when the event never happened.
public struct KafkaConsumerHealth: Sendable, Equatable {
    /// `stopping`: asked to stop, finishing its handlers and leaving the group.
    public enum Phase: Sendable, Equatable { case notStarted, running, stopping, stopped }

    public var phase: Phase
    /// Since the poll loop last turned (it turns at least every 100 ms while healthy).
    public var sinceLastTurn: Duration?
    /// The group has answered with an assignment, possibly empty.
    public var assignmentReceived: Bool
    public var assignedPartitions: Int
    /// How long this member's partitions have held work (nil: none).
    public var backlogFor: Duration?
    /// Since a message was last handled (or the loop started).
    public var sinceLastProgress: Duration?
    /// How long no broker connection has been up (nil: one is, or nothing is known yet).
    public var brokersDownFor: Duration?

    public init(
        phase: Phase, sinceLastTurn: Duration?, assignmentReceived: Bool, assignedPartitions: Int, backlogFor: Duration?,
        sinceLastProgress: Duration?, brokersDownFor: Duration? = nil
    ) {
        self.phase = phase
        self.sinceLastTurn = sinceLastTurn
        self.assignmentReceived = assignmentReceived
        self.assignedPartitions = assignedPartitions
        self.backlogFor = backlogFor
        self.sinceLastProgress = sinceLastProgress
        self.brokersDownFor = brokersDownFor
    }

    /// A verdict and the reason an operator reads on the endpoint.
    public struct Verdict: Sendable, Equatable {
        public var ok: Bool
        public var reason: String

        public init(ok: Bool, reason: String) {
            self.ok = ok
            self.reason = reason
        }
    }

    /// Alive unless the consumer stopped or its poll loop has not turned for `stall` (a stuck
    /// loop keeps its partitions from everyone until the group evicts it).
    public func liveness(stall: Duration) -> Verdict {
        switch phase {
        case .notStarted: return Verdict(ok: true, reason: "starting")
        // Restarting a member that is leaving would only cut its goodbye short.
        case .stopping: return Verdict(ok: true, reason: "stopping")
        case .stopped: return Verdict(ok: false, reason: "the consumer stopped")
        case .running:
            if let turn = sinceLastTurn, turn > stall {
                return Verdict(ok: false, reason: "the poll loop has not turned for \(Int(turn.inSeconds)) s")
            }
            return Verdict(ok: true, reason: "polling")
        }
    }

    /// Ready when alive, in touch with the broker, placed in the group (an empty assignment
    /// counts: the group has more members than partitions), and not sitting on a backlog without
    /// handling anything for `stall`. Without the broker a worker applies nothing, whatever its
    /// last assignment says (the group may have given its partitions away meanwhile).
    public func readiness(stall: Duration) -> Verdict {
        let live = liveness(stall: stall)
        guard live.ok, phase == .running else {
            return Verdict(ok: false, reason: phase == .running ? live.reason : phase == .stopping ? "stopping" : "starting")
        }
        if let down = brokersDownFor {
            return Verdict(ok: false, reason: "broker unreachable for \(Int(down.inSeconds)) s")
        }
        guard assignmentReceived else { return Verdict(ok: false, reason: "joining the consumer group") }
        if let backlog = backlogFor, backlog > stall, let idle = sinceLastProgress, idle > stall {
            return Verdict(
                ok: false, reason: "partitions hold work and nothing was handled for \(Int(min(backlog, idle).inSeconds)) s")
        }
        return Verdict(ok: true, reason: "\(assignedPartitions) partitions assigned")
    }
}

/// How far the group is behind on one partition: the broker's high watermark against the
/// group's committed offset (the low watermark when the group never committed).
public struct KafkaPartitionLag: Sendable, Equatable {
    public var topic: String
    public var partition: Int32
    public var committed: Int64?
    public var highWatermark: Int64
    public var lag: Int64

    public init(topic: String, partition: Int32, committed: Int64?, highWatermark: Int64, lag: Int64) {
        self.topic = topic
        self.partition = partition
        self.committed = committed
        self.highWatermark = highWatermark
        self.lag = lag
    }
}

extension KafkaConsumer {
    /// This member's health, for `/healthz` and `/readyz`.
    public var health: KafkaConsumerHealth {
        let now = DispatchTime.now().uptimeNanoseconds
        func since(_ instant: UInt64) -> Duration? { instant == 0 ? nil : .nanoseconds(Int64(now &- min(instant, now))) }
        let (started, stopping, received, assigned) = core.state.withLock {
            ($0.started, $0.stopRequested, $0.assignmentReceived, $0.assignment.count)
        }
        return KafkaConsumerHealth(
            phase: !started ? .notStarted : core.finished.isFired ? .stopped : stopping ? .stopping : .running,
            sinceLastTurn: since(core.lastTurn.load(ordering: .relaxed)), assignmentReceived: received,
            assignedPartitions: assigned, backlogFor: since(core.backlogSince.load(ordering: .relaxed)),
            sinceLastProgress: since(core.lastProgress.load(ordering: .relaxed)),
            brokersDownFor: since(core.brokersDownSince.load(ordering: .relaxed)))
    }

    /// The group's lag on every partition of its topics, asked of the brokers (the group
    /// coordinator's committed offsets, each partition leader's high watermark). Blocking calls on
    /// a thread of their own; librdkafka allows them beside the poll loop.
    public func groupLag(timeout: Duration = .seconds(10)) async throws -> [KafkaPartitionLag] {
        let client = client
        let topics = core.configuration.topics
        let milliseconds = Int32(clamping: timeout.inMilliseconds)
        return try await onDedicatedThread(name: "kafka-lag") {
            let kafka = client.handle
            var partitions: [KafkaTopicPartition] = []
            for (name, count) in try kafka.topics(timeoutMs: milliseconds) where topics.contains(name) {
                guard case .success(let count) = count else { continue }
                partitions += (0..<Int32(count)).map { KafkaTopicPartition(topic: name, partition: $0) }
            }
            guard !partitions.isEmpty else { return [] }
            partitions.sort()
            let entries = try kafka.committed(partitions, timeoutMs: milliseconds)
            let committed = Dictionary(entries, uniquingKeysWith: { first, _ in first })
            return try partitions.map { partition in
                let (low, high) = try kafka.queryWatermarks(partition, timeoutMs: milliseconds)
                let offset = committed[partition].flatMap { $0 >= 0 ? $0 : nil }
                return KafkaPartitionLag(
                    topic: partition.topic, partition: partition.partition, committed: offset, highWatermark: high,
                    lag: max(0, high - (offset ?? low)))
            }
        }
    }
}
