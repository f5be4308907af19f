import Foundation
import ServiceRuntime
import Synchronization

/// Publishes messages idempotently with `acks=all`, each `send` resuming when its own delivery
/// report arrives; replaces its librdkafka client when that client can no longer deliver.
///
/// The client is polled by a dedicated thread started in `init`, so `send` works before `run()`
/// is scheduled (a service group starts all services at once). Call `shutdown()` to stop it.
/// Sendable: all state lives in `ProducerCore`, which guards it with a mutex.
public final class KafkaProducer: Service, Sendable {
    public let name = "kafka-producer"
    private let core: ProducerCore
    private let shutdownTimeout: Duration

    /// - Parameter shutdownTimeout: how long `shutdown()` lets queued messages reach the broker
    ///   before failing them.
    public init(configuration: KafkaConfiguration, logger: Logger, shutdownTimeout: Duration = .seconds(10)) throws {
        core = try ProducerCore(properties: configuration.librdkafkaProperties(for: .producer), logger: logger)
        self.shutdownTimeout = shutdownTimeout
    }

    deinit { core.close() }

    /// Enqueues and suspends until the broker acknowledged (or definitively failed) THIS message.
    ///
    /// A nil key spreads messages randomly; a key always lands on the same partition.
    /// Throws `KafkaError` (retriable ones are worth sending again).
    public func send(
        topic: String, key: [UInt8]?, value: [UInt8], headers: [KafkaMessageHeader] = []
    ) async throws -> KafkaDeliveryReport {
        let message = OutgoingMessage(topic: topic, key: key, value: value, headers: headers)
        while true {
            do {
                return try await withCheckedThrowingContinuation { continuation in
                    if let refusal = core.enqueue(message, completion: { continuation.resume(with: $0.mapError { $0 }) }) {
                        continuation.resume(throwing: refusal)
                    }
                }
            } catch let rejection as ProducerCore.Rejection {
                // The message never entered librdkafka, so trying again cannot duplicate it.
                try await waitOut(rejection)
            }
        }
    }

    /// Sends `values` under one key in this order without waiting for each acknowledgement before
    /// the next send, and returns how many leading ones the broker acknowledged, with the error
    /// that ended that run. The producer is idempotent, so the partition keeps the order they were
    /// handed over in, across librdkafka's retries; a refused hand-over stops the run, so a later
    /// message is never queued ahead of an earlier one that must be sent again.
    public func send(topic: String, key: [UInt8]?, inOrder values: [[UInt8]]) async -> (acknowledged: Int, error: (any Error)?) {
        let tally = DeliveryTally()
        var queued = 0
        var refusal: (any Error)?
        for value in values {
            let message = OutgoingMessage(topic: topic, key: key, value: value, headers: [])
            let index = queued
            while true {
                guard let refused = core.enqueue(message, completion: { tally.record(index, $0) }) else {
                    queued += 1
                    break
                }
                // A full queue drains as deliveries arrive; anything else ends the run here.
                if case .queueFull? = refused as? ProducerCore.Rejection {
                    try? await Task.sleep(for: .milliseconds(5))
                    continue
                }
                refusal = refused
                break
            }
            if refusal != nil { break }
        }
        let outcomes = await tally.wait(for: queued)
        let acknowledged = outcomes.prefix { if case .success = $0 { true } else { false } }.count
        if acknowledged < outcomes.count, case .failure(let error) = outcomes[acknowledged] { return (acknowledged, error) }
        return (acknowledged, refusal)
    }

    /// After a refused hand-over, waits until the same message may be tried again (the queue has
    /// room, or the failed client was replaced); throws when it cannot be sent.
    private func waitOut(_ rejection: ProducerCore.Rejection) async throws {
        switch rejection {
        case .queueFull:
            // librdkafka's queue is the back-pressure: wait for deliveries to make room.
            try await Task.sleep(for: .milliseconds(5))
        case .clientFailed(let error, let generation):
            guard await core.replaced(generation, within: .seconds(2)) else { throw error }
        }
    }

    /// Waits until every message sent so far has its delivery report; false on timeout.
    public func flush(timeout: Duration) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while core.outstanding > 0 {
            guard ContinuousClock.now < deadline, !Task.isCancelled else { return false }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return true
    }

    /// The topic's partition count as the broker tells this producer's own client (nil: no such
    /// topic): a readiness check that opens no client and no connection of its own. Waits on a
    /// thread of its own for at most `timeout`.
    public func partitionCount(_ topic: String, timeout: Duration) async throws -> Int? {
        guard let client = core.currentClient else { throw KafkaError(code: .destroyed, reason: "the producer is shut down") }
        let milliseconds = Int32(clamping: timeout.inMilliseconds)
        return try await onDedicatedThread(name: "kafka-producer-metadata") {
            try KafkaAdmin.partitionCount(topic, on: client.handle, timeoutMs: milliseconds)
        }
    }

    /// Returns once the producer has been shut down (by `shutdown()` or cancellation).
    public func run() async throws {
        await withTaskCancellationHandler {
            await core.stopped.wait()
        } onCancel: {
            core.close()
        }
    }

    /// Flushes for at most `shutdownTimeout`, fails what is still queued, then stops polling.
    public func shutdown() async {
        if !(await flush(timeout: shutdownTimeout)) {
            core.logger.warning("kafka producer shutting down with undelivered messages")
        }
        core.close()
        await core.stopped.wait()
    }
}

/// A message on its way into librdkafka.
struct OutgoingMessage: Sendable {
    var topic: String
    var key: [UInt8]?
    var value: [UInt8]
    var headers: [KafkaMessageHeader]
}

/// The producer's clients and the thread that polls them.
///
/// Sendable: mutable state is inside `state`; `produceva` runs under that lock, so no message
/// is handed to a client after it was retired.
final class ProducerCore: Sendable {
    private struct State {
        /// Nil once closed: sends fail.
        var client: RdKafkaClient?
        var generation = 0
        /// Replaced or closed clients, polled until every delivery report was served.
        var retired: [RdKafkaClient] = []
        var closeRequested = false
        var replacement: (generation: Int, reason: String)?
    }

    let logger: Logger
    let stopped = ShutdownTrigger()
    private let properties: [String: String]
    private let state: Mutex<State>
    private let replacements = MetricsRegistry.shared.counter(
        "kafka_producer_replacements_total", help: "librdkafka producer clients replaced after they stopped delivering")
    private let failures = MetricsRegistry.shared.counter(
        "kafka_producer_delivery_failures_total", help: "Messages whose delivery failed")

    /// librdkafka bumps the idempotent producer's epoch about ten times a second, forever,
    /// once the broker has forgotten the producer id (a restarted broker with memory storage).
    /// A healthy producer bumps it rarely, so several bumps within one statistics interval mean
    /// the client is stuck and must be replaced.
    static let epochBumpsPerIntervalLimit: Int64 = 3
    /// Delivery errors after which the idempotent producer's sequence state is unusable.
    static let wedgingErrors: Set<KafkaError.Code> = [
        .fatal, .unknownProducerID, .outOfOrderSequenceNumber, .invalidProducerEpoch, .invalidProducerIDMapping,
    ]

    init(properties: [String: String], logger: Logger) throws(KafkaError) {
        self.properties = properties
        self.logger = logger
        state = Mutex(State())
        let client = try makeClient(generation: 0)
        state.withLock { $0.client = client }
        let thread = Thread { [self] in pollLoop() }
        thread.name = "kafka-producer-poll"
        thread.start()
    }

    private func makeClient(generation: Int) throws(KafkaError) -> RdKafkaClient {
        let lastEpoch = Locked<Int64?>(nil)
        let requestReplacement: @Sendable (String) -> Void = { [weak self] reason in
            self?.state.withLock { state in
                if state.generation == generation, state.replacement == nil {
                    state.replacement = (generation, reason)
                }
            }
        }
        let failures = failures
        let context = ClientContext(
            logger: logger.with(["kafka.producer.generation": .int(Int64(generation))]),
            onError: { error in
                if error.isFatal { requestReplacement("fatal error: \(error)") }
            },
            onStatistics: { json in
                guard let epoch = Self.producerEpoch(statistics: json) else { return }
                let previous = lastEpoch.withLock { last in
                    defer { last = epoch }
                    return last
                }
                if let previous, epoch - previous >= Self.epochBumpsPerIntervalLimit {
                    requestReplacement("producer epoch bumped \(epoch - previous) times in one statistics interval")
                }
            },
            onDelivery: { error in
                guard let error else { return }
                failures.increment()
                if error.isFatal || Self.wedgingErrors.contains(error.code) {
                    requestReplacement("delivery failed: \(error)")
                }
            })
        return try RdKafkaClient(.producer, properties: properties, context: context)
    }

    /// The idempotence state's `producer_epoch` in a statistics document (it appears once).
    static func producerEpoch(statistics json: String) -> Int64? {
        guard let key = json.range(of: "\"producer_epoch\"") else { return nil }
        let value = json[key.upperBound...].drop { $0 == ":" || $0.isWhitespace }
        return Int64(value.prefix { $0 == "-" || $0.isNumber })
    }

    /// Why a message was refused before librdkafka took it.
    enum Rejection: Error {
        case queueFull
        /// The client raised a fatal error; it is being replaced.
        case clientFailed(KafkaError, generation: Int)
    }

    /// Hands `message` to librdkafka, which calls `completion` with its delivery report; returns
    /// why it was refused instead (`completion` is then never called).
    func enqueue(
        _ message: OutgoingMessage, completion: @escaping @Sendable (Result<KafkaDeliveryReport, KafkaError>) -> Void
    ) -> (any Error)? {
        let box = Unmanaged.passRetained(DeliveryBox(topic: message.topic, completion: completion))
        let error: (any Error)? = state.withLock { state in
            guard let client = state.client, !state.closeRequested else {
                return KafkaError(code: .destroyed, reason: "the producer is shut down")
            }
            guard
                let error = client.handle.produce(
                    topic: message.topic, key: message.key, value: message.value, headers: message.headers, opaque: box.toOpaque())
            else { return nil }
            if error.code == .queueFull { return Rejection.queueFull }
            guard error.isFatal || client.fatalError != nil else { return error }
            if state.replacement == nil { state.replacement = (state.generation, "fatal error: \(error)") }
            return Rejection.clientFailed(error, generation: state.generation)
        }
        if error != nil { box.release() }
        return error
    }

    /// Waits until the client of `generation` was replaced; false on timeout or after close.
    func replaced(_ generation: Int, within timeout: Duration) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline, !Task.isCancelled {
            let (current, open) = state.withLock { ($0.generation, $0.client != nil) }
            if !open { return false }
            if current > generation { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return false
    }

    /// The client sends go to; nil once closed.
    var currentClient: RdKafkaClient? { state.withLock { $0.closeRequested ? nil : $0.client } }

    /// Messages not yet reported, across the current and the retired clients.
    var outstanding: Int {
        state.withLock { state in
            (state.client?.handle.outstanding ?? 0) + state.retired.reduce(0) { $0 + $1.handle.outstanding }
        }
    }

    /// Stops accepting messages; the poll thread fails what is queued and exits.
    func close() {
        state.withLock { $0.closeRequested = true }
    }

    /// Serves delivery reports, statistics and errors; replaces a stuck client; on close, fails
    /// what is left and waits until every sender was resumed before the thread ends.
    private func pollLoop() {
        var lastReplacement: ContinuousClock.Instant?
        while true {
            let (client, retired, closing) = state.withLock { ($0.client, $0.retired, $0.closeRequested) }
            if closing, let client {
                retire(client, reason: nil)
                continue
            }
            if let client { client.handle.poll(timeoutMs: retired.isEmpty ? 100 : 10) }
            for old in retired {
                old.handle.poll(timeoutMs: client == nil ? 10 : 0)
                if old.handle.outstanding == 0 {
                    state.withLock { $0.retired.removeAll { $0 === old } }
                }
            }
            if client == nil, retired.isEmpty { break }
            guard let client else { continue }

            if let fatal = client.fatalError {
                state.withLock { state in
                    if state.replacement == nil { state.replacement = (state.generation, "fatal error: \(fatal)") }
                }
            }
            let pending = state.withLock { state -> String? in
                guard let request = state.replacement, request.generation == state.generation else { return nil }
                return request.reason
            }
            // At most one replacement a second: a broker that is down makes every client fail.
            if let reason = pending, lastReplacement.map({ ContinuousClock.now - $0 > .seconds(1) }) ?? true {
                lastReplacement = .now
                replace(client, reason: reason)
            }
        }
        stopped.fire()
    }

    /// Swaps in a fresh client (or none, when closing) and purges the old one: its pending
    /// sends fail now instead of timing out, and later sends go to the fresh client.
    private func replace(_ client: RdKafkaClient, reason: String) {
        let generation = state.withLock { $0.generation } + 1
        do {
            let fresh = try makeClient(generation: generation)
            retire(client, reason: reason, replacement: fresh)
        } catch {
            logger.error("kafka producer could not be replaced", ["error": .string("\(error)")])
        }
    }

    private func retire(_ client: RdKafkaClient, reason: String?, replacement: RdKafkaClient? = nil) {
        state.withLock { state in
            state.client = state.closeRequested ? nil : replacement
            state.generation += 1
            state.replacement = nil
            state.retired.append(client)
        }
        client.handle.purge()
        if let reason {
            replacements.increment()
            logger.warning("kafka producer replaced; its pending messages failed", ["kafka.reason": .string(reason)])
        }
    }
}

/// The delivery reports of messages sent together, in the order sent; `wait` returns once the
/// first `count` have theirs (a report may arrive before anyone waits).
final class DeliveryTally: Sendable {
    private struct State {
        var outcomes: [Int: Result<KafkaDeliveryReport, KafkaError>] = [:]
        var waiter: (count: Int, continuation: CheckedContinuation<Void, Never>)?
    }
    private let state = Mutex(State())

    func record(_ index: Int, _ outcome: Result<KafkaDeliveryReport, KafkaError>) {
        let done = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.outcomes[index] = outcome
            guard let waiter = state.waiter, state.outcomes.count >= waiter.count else { return nil }
            state.waiter = nil
            return waiter.continuation
        }
        done?.resume()
    }

    func wait(for count: Int) async -> [Result<KafkaDeliveryReport, KafkaError>] {
        await withCheckedContinuation { continuation in
            let ready = state.withLock { state in
                guard state.outcomes.count < count else { return true }
                state.waiter = (count, continuation)
                return false
            }
            if ready { continuation.resume() }
        }
        return state.withLock { state in (0..<count).map { state.outcomes[$0]! } }
    }
}
