import Dispatch
import Foundation
import ServiceRuntime
import Synchronization

/// A member of a consumer group that calls a handler for every message: one partition's
/// messages in order (strictly, or per key with `maxInFlightPerPartition` above 1), different
/// partitions concurrently, and a message's offset is committed only after its handler and
/// those of every earlier message of the partition returned.
///
/// A handler that throws gets the same message again after a backoff: its key waits (with one
/// message in flight, its partition); other keys go on up to `maxBufferedMessagesPerPartition`
/// held, as nothing is committed past it.
/// On a rebalance, revoked partitions finish their running handlers and commit what was handled
/// before they are released, so no handled message is lost or handled twice by the next owner.
/// Sendable: the librdkafka handle is used only by the poll thread; the rest is in `ConsumerCore`.
public final class KafkaConsumer: Service, Sendable {
    public let name: String
    let core: ConsumerCore
    let client: RdKafkaClient

    public init(
        configuration: KafkaConsumerConfiguration, logger: Logger,
        handler: @escaping @Sendable (KafkaMessage) async throws -> Void
    ) throws {
        name = "kafka-consumer(\(configuration.groupID))"
        // Tells apart the members of one group that share a process (and a log).
        let instance = UUID().uuidString.prefix(8).lowercased()
        let logger = logger.with(["kafka.group": .string(configuration.groupID), "kafka.consumer": .string(instance)])
        let core = ConsumerCore(configuration: configuration, logger: logger, handler: handler)
        let context = ClientContext(
            logger: logger,
            onError: { error in if error.isFatal { core.fail(error) } },
            onStatistics: { json in core.observeBrokers(statistics: json) },
            onRebalance: { kafka, event in core.rebalance(kafka, event) })
        client = try RdKafkaClient(
            .consumer,
            properties: configuration.kafka.librdkafkaProperties(
                for: .consumer(groupID: configuration.groupID, instanceID: configuration.instanceID)),
            context: context)
        self.core = core
    }

    /// Called (from the consumer's poll thread) after each assignment change, for logging/metrics.
    public func onAssignmentChange(_ callback: @escaping @Sendable (_ assigned: [KafkaTopicPartition]) -> Void) {
        core.state.withLock { $0.assignmentCallbacks.append(callback) }
    }

    /// The partitions this member currently owns, sorted.
    public var assignment: [KafkaTopicPartition] { core.state.withLock { $0.assignment } }

    /// Joins the group and consumes until `shutdown()` (or cancellation); then finishes running
    /// handlers, commits, and leaves the group. Throws on a fatal consumer error.
    public func run() async throws {
        guard
            core.state.withLock({ state in
                defer { state.started = true }
                return !state.started
            })
        else {
            throw KafkaError(code: .invalidState, reason: "a consumer runs only once")
        }
        defer { core.finished.fire() }
        let core = core
        let client = client
        try await withTaskCancellationHandler {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<max(1, core.configuration.maxConcurrentPartitions) {
                    group.addTask { await core.work() }
                }
                group.addTask {
                    try await onDedicatedThread(name: "kafka-consumer-poll") { try core.pollLoop(client) }
                }
                try await group.waitForAll()
            }
        } onCancel: {
            core.requestStop()
        }
    }

    /// A stop was asked for: `/readyz` says "stopping" at once, before this member's turn to stop.
    public func shutdownRequested() { core.requestStop() }

    /// Asks the consumer to stop and waits until it has left the group (if it was running), at
    /// most `closeTimeout`. Not from inside the handler: stopping waits for the running handlers.
    public func shutdown() async {
        let started = core.state.withLock { state in
            state.stopRequested = true
            return state.started
        }
        guard started else { return }
        if !(await core.finished.wait(timeout: core.configuration.closeTimeout)) {
            core.logger.warning(
                "kafka consumer did not close in time; left to the process exit",
                ["timeout_ms": .int(core.configuration.closeTimeout.inMilliseconds)])
        }
    }
}

/// The consumer's state, its poll loop and its workers.
///
/// Sendable: mutable state is behind `state` or inside the scheduler; C calls happen only on
/// the poll thread (including the rebalance callback, which librdkafka runs inside the poll).
final class ConsumerCore: Sendable {
    struct State {
        var started = false
        var stopRequested = false
        var fatal: KafkaError?
        var assignment: [KafkaTopicPartition] = []
        /// The group answered at least once (an empty assignment included: more members than partitions).
        var assignmentReceived = false
        var assignmentCallbacks: [@Sendable ([KafkaTopicPartition]) -> Void] = []
    }

    let configuration: KafkaConsumerConfiguration
    let logger: Logger
    let state = Mutex(State())
    let finished = ShutdownTrigger()
    /// Monotonic instants (`DispatchTime` nanoseconds; 0: never) the health checks read: the poll
    /// loop's last turn, the last handled message, the start of the current backlog.
    let lastTurn = Atomic<UInt64>(0)
    let lastProgress = Atomic<UInt64>(0)
    let backlogSince = Atomic<UInt64>(0)
    /// Since when no broker connection has been up, by the statistics (0: one is up, or no
    /// statistics yet).
    let brokersDownSince = Atomic<UInt64>(0)
    private let handler: @Sendable (KafkaMessage) async throws -> Void
    private let scheduler: PartitionScheduler
    private let handled: Counter
    private let handlerFailures: Counter
    private let assignedPartitions: Gauge

    init(
        configuration: KafkaConsumerConfiguration, logger: Logger,
        handler: @escaping @Sendable (KafkaMessage) async throws -> Void
    ) {
        self.configuration = configuration
        self.logger = logger
        self.handler = handler
        let buffered = max(1, configuration.maxBufferedMessagesPerPartition)
        scheduler = PartitionScheduler(
            pauseAt: buffered, resumeAt: buffered / 2, maxInFlight: configuration.maxInFlightPerPartition)
        let labels = ["group": configuration.groupID]
        handled = MetricsRegistry.shared.counter(
            "kafka_consumer_messages_handled_total", help: "Messages whose handler returned normally", labels: labels)
        handlerFailures = MetricsRegistry.shared.counter(
            "kafka_consumer_handler_failures_total", help: "Handler calls that threw (the message is retried)",
            labels: labels)
        assignedPartitions = MetricsRegistry.shared.gauge(
            "kafka_consumer_assigned_partitions", help: "Partitions assigned to this consumer", labels: labels)
    }

    func requestStop() { state.withLock { $0.stopRequested = true } }

    /// Notes whether any broker connection is up in a statistics document: librdkafka writes each
    /// broker's `"state":"UP"` (the group's own state is lower case).
    func observeBrokers(statistics json: String) {
        if json.contains(#""state":"UP""#) {
            brokersDownSince.store(0, ordering: .relaxed)
        } else if brokersDownSince.load(ordering: .relaxed) == 0 {
            brokersDownSince.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
        }
    }

    /// No broker connection was up at the last statistics.
    var brokersDown: Bool { brokersDownSince.load(ordering: .relaxed) != 0 }

    func fail(_ error: KafkaError) {
        state.withLock { state in if state.fatal == nil { state.fatal = error } }
    }

    // MARK: Workers (Swift tasks).

    func work() async {
        while let work = await scheduler.next() {
            scheduler.complete(work, handled: await handle(work))
        }
    }

    /// Calls the handler until it returns normally (true) or the partition is revoked (false).
    private func handle(_ work: PartitionScheduler.Work) async -> Bool {
        var backoff = configuration.retryBackoff
        var attempt = 1
        while true {
            do {
                try await handler(work.message)
                handled.increment()
                lastProgress.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
                return true
            } catch {
                handlerFailures.increment()
                logger.warning(
                    "kafka message handler failed; retrying the same message",
                    [
                        "kafka.topic": .string(work.message.topic), "kafka.partition": .int(Int64(work.message.partition)),
                        "kafka.offset": .int(work.message.offset), "attempt": .int(Int64(attempt)),
                        "error": .string("\(error)"),
                    ])
                if await work.revoked.wait(timeout: backoff) { return false }
                backoff = min(backoff * 2, configuration.maxRetryBackoff)
                attempt += 1
            }
        }
    }

    // MARK: Poll thread.

    /// Subscribes, feeds the scheduler until asked to stop, then finishes running handlers,
    /// commits what they handled and leaves the group. Runs on its own thread: it blocks.
    func pollLoop(_ client: RdKafkaClient) throws {
        defer { scheduler.close() }
        let kafka = client.handle
        if let error = kafka.subscribe(configuration.topics) {
            _ = kafka.closeConsumer()
            throw error
        }
        logger.info("kafka consumer subscribed", ["kafka.topics": .string(configuration.topics.joined(separator: ","))])

        var lastUpkeep = ContinuousClock.now
        var lastBacklogCheck = ContinuousClock.now
        lastProgress.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
        while state.withLock({ !$0.stopRequested && $0.fatal == nil }) {
            lastTurn.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
            if let polled = kafka.consumerPoll(timeoutMs: 100) { consume(polled, kafka) }
            if ContinuousClock.now - lastUpkeep >= .milliseconds(50) {
                lastUpkeep = .now
                upkeep(kafka)
            }
            if ContinuousClock.now - lastBacklogCheck >= .seconds(1) {
                lastBacklogCheck = .now
                checkBacklog(kafka)
            }
        }

        let fatal = state.withLock { $0.fatal }
        // A commit or a goodbye waits for the group's coordinator: with the broker gone it would
        // take the whole grace. Handled offsets not committed are handed out again, and the
        // handlers' claims make that harmless.
        let reachable = !brokersDown
        let assigned = scheduler.assigned
        kafka.setPaused(assigned, true)  // stop fetching while the last handlers finish
        release(kafka, assigned, commit: fatal == nil && reachable)
        if fatal == nil, reachable, configuration.instanceID != nil { leaveGroup(kafka) }
        if let error = kafka.closeConsumer() {
            logger.warning("kafka consumer close failed", ["error": .string(error.description)])
        }
        logger.info("kafka consumer stopped")
        if let fatal { throw fatal }
    }

    /// A static member's close does not leave the group (KIP-345): its partitions would wait out
    /// the session. Unsubscribing first does leave, so whoever replaces this member (a new pod has
    /// a new name) gets them at once; only a crash keeps them for a restart under the same id.
    private func leaveGroup(_ kafka: RdKafka) {
        if let error = kafka.unsubscribe() {
            logger.warning("kafka unsubscribe failed", ["error": .string(error.description)])
            return
        }
        // The revocation is served by the poll; the leave request follows it.
        let deadline = ContinuousClock.now + .seconds(2)
        while ContinuousClock.now < deadline {
            _ = kafka.consumerPoll(timeoutMs: 50)
            if state.withLock({ $0.assignment.isEmpty }) { break }
        }
    }

    private func consume(_ polled: ConsumerPoll, _ kafka: RdKafka) {
        switch polled {
        case .message(let message):
            if scheduler.enqueue(message) { kafka.setPaused([message.topicPartition], true) }
        case .endOfPartition:
            break
        case .fatal(let error):
            fail(error)
        case .error(let error, let topic):
            // Repeats for as long as a broker is away: one line per kind and window.
            guard let suppressed = LogThrottle.shared.admit("consumer:\(error.code.rawValue)") else { return }
            logger.warning(
                "kafka consumer error",
                [
                    "kafka.topic": .string(topic), "error": .string(error.description),
                    "kafka.suppressed": .int(Int64(suppressed)),
                ])
        }
    }

    /// Stores handled offsets (auto-commit sends them in batches) and resumes drained partitions.
    private func upkeep(_ kafka: RdKafka) {
        let offsets = scheduler.offsetsToStore()
        if !offsets.isEmpty, let error = kafka.storeOffsets(offsets) {
            logger.warning("kafka offsets store failed", ["error": .string(error.description)])
        }
        kafka.setPaused(scheduler.partitionsToResume(), false)
    }

    /// Notes when this member's partitions start to hold work: messages fetched and not handled,
    /// or a high watermark (as of the last fetch) beyond the fetch position. Local calls only.
    private func checkBacklog(_ kafka: RdKafka) {
        var pending = scheduler.hasOutstanding
        let assigned = scheduler.assigned
        if !pending, !assigned.isEmpty {
            pending = kafka.positions(assigned).contains { partition, position in
                guard let high = kafka.cachedHighWatermark(partition) else { return false }
                return position >= 0 && high > position
            }
        }
        if !pending {
            backlogSince.store(0, ordering: .relaxed)
        } else if backlogSince.load(ordering: .relaxed) == 0 {
            backlogSince.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
        }
    }

    // MARK: Rebalancing (inside rd_kafka_consumer_poll, on the poll thread).

    func rebalance(_ kafka: RdKafka, _ event: RebalanceEvent) {
        var failure: KafkaError?
        switch event {
        case .assign(let entries):
            state.withLock { $0.assignmentReceived = true }
            scheduler.assign(entries.map(\.0))
            failure = kafka.isCooperative ? kafka.incrementalAssign(entries) : kafka.assign(entries)
        case .revoke(let entries):
            let lost = kafka.assignmentLost
            if lost { logger.warning("kafka partitions lost; handled offsets not yet committed are dropped") }
            release(kafka, entries.map(\.0), commit: !lost)
            failure = kafka.isCooperative ? kafka.incrementalUnassign(entries) : kafka.assign(nil)
        case .failed(let error):
            logger.error("kafka rebalance failed", ["error": .string(error.description)])
            release(kafka, scheduler.assigned, commit: false)
            failure = kafka.assign(nil)
        }
        if let failure {
            logger.error("kafka assignment update failed", ["error": .string(failure.description)])
        }
        publishAssignment()
    }

    /// Stops dispatching `partitions`, waits for their running handlers, and (unless the
    /// partitions were lost to another member) commits synchronously what was handled.
    private func release(_ kafka: RdKafka, _ partitions: [KafkaTopicPartition], commit: Bool) {
        let started = ContinuousClock.now
        let reached = scheduler.revoke(partitions)
        guard !reached.isEmpty else { return }
        // Pausing outlives an assignment in librdkafka; a later owner must fetch.
        kafka.setPaused(reached.filter(\.paused).map(\.0), false)
        let offsets = reached.compactMap { partition, processed, _ in processed.map { (partition, $0) } }
        if commit, !offsets.isEmpty {
            if let error = kafka.storeAndCommit(offsets) {
                logger.error("kafka commit of released partitions failed", ["error": .string(error.description)])
            }
        }
        let waited = ContinuousClock.now - started
        logger.info(
            "kafka partitions released",
            [
                "kafka.partitions": .string(reached.map(\.0).sorted().map(\.description).joined(separator: ",")),
                "kafka.committed": .int(Int64(commit ? offsets.count : 0)),
                "duration_ms": .int(waited.inMilliseconds),
            ])
    }

    /// Reports the scheduler's view of the assignment. Never asks librdkafka (`rd_kafka_assignment`)
    /// here: from inside the rebalance callback that call can wait on the thread that waits on us.
    private func publishAssignment() {
        let assignment = scheduler.assigned.sorted()
        let callbacks = state.withLock { state -> [@Sendable ([KafkaTopicPartition]) -> Void]? in
            guard state.assignment != assignment else { return nil }
            state.assignment = assignment
            return state.assignmentCallbacks
        }
        // An incremental rebalance may end with nothing added or removed.
        guard let callbacks else { return }
        assignedPartitions.set(Double(assignment.count))
        logger.info(
            "kafka assignment changed",
            [
                "kafka.partitions": .string(assignment.map(\.description).joined(separator: ",")),
                "kafka.partition_count": .int(Int64(assignment.count)),
            ])
        callbacks.forEach { $0(assignment) }
    }
}
