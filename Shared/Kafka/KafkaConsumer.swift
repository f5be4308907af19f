import CRdKafka
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
            onRebalance: { rk, err, partitions in core.rebalance(rk, err, partitions) })
        client = try RdKafkaClient(
            type: RD_KAFKA_CONSUMER,
            properties: configuration.kafka.librdkafkaProperties(
                for: .consumer(groupID: configuration.groupID, instanceID: configuration.instanceID)),
            context: context)
        // Every event (rebalances, errors) is then served by rd_kafka_consumer_poll.
        rd_kafka_poll_set_consumer(client.handle)
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
        let rk = client.handle
        let subscribed = withPartitionList(configuration.topics.map { (KafkaTopicPartition(topic: $0, partition: RD_KAFKA_PARTITION_UA), 0) }) {
            rd_kafka_subscribe(rk, $0)
        }
        guard subscribed == RD_KAFKA_RESP_ERR_NO_ERROR else {
            rd_kafka_consumer_close(rk)
            throw KafkaError(subscribed)
        }
        logger.info("kafka consumer subscribed", ["kafka.topics": .string(configuration.topics.joined(separator: ","))])

        var lastUpkeep = ContinuousClock.now
        var lastBacklogCheck = ContinuousClock.now
        lastProgress.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
        while state.withLock({ !$0.stopRequested && $0.fatal == nil }) {
            lastTurn.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
            if let message = rd_kafka_consumer_poll(rk, 100) {
                consume(message, rk)
                rd_kafka_message_destroy(message)
            }
            if ContinuousClock.now - lastUpkeep >= .milliseconds(50) {
                lastUpkeep = .now
                upkeep(rk)
            }
            if ContinuousClock.now - lastBacklogCheck >= .seconds(1) {
                lastBacklogCheck = .now
                checkBacklog(rk)
            }
        }

        let fatal = state.withLock { $0.fatal }
        // A commit or a goodbye waits for the group's coordinator: with the broker gone it would
        // take the whole grace. Handled offsets not committed are handed out again, and the
        // handlers' claims make that harmless.
        let reachable = !brokersDown
        let assigned = scheduler.assigned
        setPaused(rk, assigned, true)  // stop fetching while the last handlers finish
        release(rk, assigned, commit: fatal == nil && reachable)
        if fatal == nil, reachable, configuration.instanceID != nil { leaveGroup(rk) }
        let closed = rd_kafka_consumer_close(rk)  // serves the final revocation, leaves the group
        if closed != RD_KAFKA_RESP_ERR_NO_ERROR {
            logger.warning("kafka consumer close failed", ["error": .string(KafkaError(closed).description)])
        }
        logger.info("kafka consumer stopped")
        if let fatal { throw fatal }
    }

    /// A static member's close does not leave the group (KIP-345): its partitions would wait out
    /// the session. Unsubscribing first does leave, so whoever replaces this member (a new pod has
    /// a new name) gets them at once; only a crash keeps them for a restart under the same id.
    private func leaveGroup(_ rk: OpaquePointer) {
        let err = rd_kafka_unsubscribe(rk)
        guard err == RD_KAFKA_RESP_ERR_NO_ERROR else {
            logger.warning("kafka unsubscribe failed", ["error": .string(KafkaError(err).description)])
            return
        }
        // The revocation is served by the poll; the leave request follows it.
        let deadline = ContinuousClock.now + .seconds(2)
        while ContinuousClock.now < deadline {
            if let message = rd_kafka_consumer_poll(rk, 50) { rd_kafka_message_destroy(message) }
            if state.withLock({ $0.assignment.isEmpty }) { break }
        }
    }

    private func consume(_ message: UnsafeMutablePointer<rd_kafka_message_t>, _ rk: OpaquePointer) {
        let err = message.pointee.err
        switch err {
        case RD_KAFKA_RESP_ERR_NO_ERROR:
            let copy = Self.copy(message)
            if scheduler.enqueue(copy) { setPaused(rk, [copy.topicPartition], true) }
        case RD_KAFKA_RESP_ERR__PARTITION_EOF:
            break
        case RD_KAFKA_RESP_ERR__FATAL:
            fail(fatalErrorOf(rk) ?? KafkaError(err))
        default:
            // Repeats for as long as a broker is away: one line per kind and window.
            guard let suppressed = LogThrottle.shared.admit("consumer:\(err.rawValue)") else { return }
            let topic = message.pointee.rkt.map { String(cString: rd_kafka_topic_name($0)) } ?? ""
            logger.warning(
                "kafka consumer error",
                [
                    "kafka.topic": .string(topic),
                    "error": .string(KafkaError(err, reason: String(cString: rd_kafka_message_errstr(message))).description),
                    "kafka.suppressed": .int(Int64(suppressed)),
                ])
        }
    }

    /// Stores handled offsets (auto-commit sends them in batches) and resumes drained partitions.
    private func upkeep(_ rk: OpaquePointer) {
        let offsets = scheduler.offsetsToStore()
        if !offsets.isEmpty {
            let err = withPartitionList(offsets) { rd_kafka_offsets_store(rk, $0) }
            if err != RD_KAFKA_RESP_ERR_NO_ERROR {
                logger.warning("kafka offsets store failed", ["error": .string(KafkaError(err).description)])
            }
        }
        let drained = scheduler.partitionsToResume()
        if !drained.isEmpty { setPaused(rk, drained, false) }
    }

    /// Notes when this member's partitions start to hold work: messages fetched and not handled,
    /// or a high watermark (as of the last fetch) beyond the fetch position. Local calls only.
    private func checkBacklog(_ rk: OpaquePointer) {
        var pending = scheduler.hasOutstanding
        let assigned = scheduler.assigned
        if !pending, !assigned.isEmpty {
            let positions = withPartitionList(assigned.map { ($0, Int64(RD_KAFKA_OFFSET_INVALID)) }) { list in
                rd_kafka_position(rk, list) == RD_KAFKA_RESP_ERR_NO_ERROR ? KafkaTopicPartition.entries(of: list) : []
            }
            pending = positions.contains { partition, position in
                var low: Int64 = 0
                var high: Int64 = 0
                let known = rd_kafka_get_watermark_offsets(rk, partition.topic, partition.partition, &low, &high)
                return known == RD_KAFKA_RESP_ERR_NO_ERROR && position >= 0 && high > position
            }
        }
        if !pending {
            backlogSince.store(0, ordering: .relaxed)
        } else if backlogSince.load(ordering: .relaxed) == 0 {
            backlogSince.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
        }
    }

    private func setPaused(_ rk: OpaquePointer, _ partitions: [KafkaTopicPartition], _ paused: Bool) {
        guard !partitions.isEmpty else { return }
        _ = withPartitionList(partitions.map { ($0, Int64(RD_KAFKA_OFFSET_INVALID)) }) {
            paused ? rd_kafka_pause_partitions(rk, $0) : rd_kafka_resume_partitions(rk, $0)
        }
    }

    /// Copies a message out of librdkafka's buffers.
    static func copy(_ message: UnsafeMutablePointer<rd_kafka_message_t>) -> KafkaMessage {
        let m = message.pointee
        var headers: [KafkaMessageHeader] = []
        var list: OpaquePointer?
        if rd_kafka_message_headers(message, &list) == RD_KAFKA_RESP_ERR_NO_ERROR, let list {
            var name: UnsafePointer<CChar>?
            var value: UnsafeRawPointer?
            var size = 0
            var index = 0
            while rd_kafka_header_get_all(list, index, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR {
                headers.append(
                    KafkaMessageHeader(
                        key: name.map { String(cString: $0) } ?? "",
                        value: value.map { Array(UnsafeRawBufferPointer(start: $0, count: size)) } ?? []))
                index += 1
            }
        }
        return KafkaMessage(
            topic: String(cString: rd_kafka_topic_name(m.rkt)), partition: m.partition, offset: m.offset,
            key: m.key.map { Array(UnsafeRawBufferPointer(start: $0, count: m.key_len)) },
            value: m.payload.map { Array(UnsafeRawBufferPointer(start: $0, count: m.len)) } ?? [],
            headers: headers)
    }

    // MARK: Rebalancing (inside rd_kafka_consumer_poll, on the poll thread).

    func rebalance(
        _ rk: OpaquePointer, _ err: rd_kafka_resp_err_t, _ list: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>
    ) {
        let partitions = KafkaTopicPartition.entries(of: list).map(\.0)
        let cooperative = String(cString: rd_kafka_rebalance_protocol(rk)) == "COOPERATIVE"
        var failure: KafkaError?
        switch err {
        case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
            state.withLock { $0.assignmentReceived = true }
            scheduler.assign(partitions)
            if cooperative {
                failure = rd_kafka_incremental_assign(rk, list).map(KafkaError.init(consuming:))
            } else {
                failure = Self.check(rd_kafka_assign(rk, list))
            }
        case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
            let lost = rd_kafka_assignment_lost(rk) != 0
            if lost { logger.warning("kafka partitions lost; handled offsets not yet committed are dropped") }
            release(rk, partitions, commit: !lost)
            if cooperative {
                failure = rd_kafka_incremental_unassign(rk, list).map(KafkaError.init(consuming:))
            } else {
                failure = Self.check(rd_kafka_assign(rk, nil))
            }
        default:
            logger.error("kafka rebalance failed", ["error": .string(KafkaError(err).description)])
            release(rk, scheduler.assigned, commit: false)
            failure = Self.check(rd_kafka_assign(rk, nil))
        }
        if let failure {
            logger.error("kafka assignment update failed", ["error": .string(failure.description)])
        }
        publishAssignment()
    }

    private static func check(_ err: rd_kafka_resp_err_t) -> KafkaError? {
        err == RD_KAFKA_RESP_ERR_NO_ERROR ? nil : KafkaError(err)
    }

    /// Stops dispatching `partitions`, waits for their running handlers, and (unless the
    /// partitions were lost to another member) commits synchronously what was handled.
    private func release(_ rk: OpaquePointer, _ partitions: [KafkaTopicPartition], commit: Bool) {
        let started = ContinuousClock.now
        let reached = scheduler.revoke(partitions)
        guard !reached.isEmpty else { return }
        // Pausing outlives an assignment in librdkafka; a later owner must fetch.
        setPaused(rk, reached.filter(\.paused).map(\.0), false)
        let offsets = reached.compactMap { partition, processed, _ in processed.map { (partition, $0) } }
        if commit, !offsets.isEmpty {
            // Stored first: librdkafka's auto-commit commits the stored offsets again when it
            // unassigns, and an older stored offset would move the group back.
            let err = withPartitionList(offsets) { list in
                let stored = rd_kafka_offsets_store(rk, list)
                return stored == RD_KAFKA_RESP_ERR_NO_ERROR ? rd_kafka_commit(rk, list, 0) : stored
            }
            if err != RD_KAFKA_RESP_ERR_NO_ERROR {
                logger.error("kafka commit of released partitions failed", ["error": .string(KafkaError(err).description)])
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
