import Events
import Kafka
import ServiceRuntime
import Storage

/// Publishes outbox entries and deletes each one once the broker acknowledged it.
///
/// Deletions of concurrent publishes share one statement (one at a time, each taking every
/// acknowledgement that arrived meanwhile): a DELETE per message would cost a commit per event.
public struct EventPublisher: Sendable {
    public let producer: KafkaProducer
    public let outbox: EventStore
    public let logger: Logger
    /// With the broker down every entry fails: a line per entry would be a line per notification.
    private let failures: ThrottledLog
    private let deletions: GroupCommit<[Int64], Void>
    private let published = MetricsRegistry.shared.counter(
        "subs_outbox_published_total", help: "Outbox messages acknowledged by the broker")
    private let failed = MetricsRegistry.shared.counter(
        "subs_outbox_publish_failures_total", help: "Outbox messages the broker did not acknowledge (retried by the relay)")

    public init(producer: KafkaProducer, outbox: EventStore, logger: Logger) {
        self.producer = producer
        self.outbox = outbox
        self.logger = logger
        failures = ThrottledLog(logger: logger)
        deletions = GroupCommit(
            maxBatchSize: 256, maxConcurrentBatches: 1,
            sizeMetric: ("subs_outbox_cleanup_batch_size", "Publishes whose outbox rows one statement deleted")
        ) { lists in
            try await outbox.markPublished(lists.flatMap { $0 })
            return lists.map { _ in () }
        }
    }

    /// Publishes the entries concurrently; returns how many were acknowledged. A failure leaves the
    /// outbox row in place for the relay, so it is logged, never thrown.
    @discardableResult
    public func publish(_ entries: [OutboxEntry]) async -> Int {
        guard !entries.isEmpty else { return 0 }
        let acknowledged = await withTaskGroup(of: Int64?.self) { group in
            for entry in entries {
                group.addTask {
                    do {
                        var headers: [KafkaMessageHeader] = []
                        if let trace = entry.envelope.traceID {
                            headers.append(KafkaMessageHeader(key: EventEnvelope.traceHeader, value: Array(trace.utf8)))
                        }
                        _ = try await producer.send(
                            topic: entry.topic, key: Array(entry.routingKey.utf8), value: entry.envelope.encoded(),
                            headers: headers)
                        return entry.id
                    } catch {
                        failures.record(
                            "publish failed, left for the outbox relay", reason: "not_acknowledged",
                            ["event.id": .int(entry.envelope.eventID), "error": .string("\(error)")])
                        return nil
                    }
                }
            }
            var ids: [Int64] = []
            for await id in group { if let id { ids.append(id) } }
            return ids
        }
        published.increment(by: acknowledged.count)
        failed.increment(by: entries.count - acknowledged.count)
        do {
            if !acknowledged.isEmpty { try await deletions.submit(acknowledged) }
        } catch {
            // The messages are out; the rows will be published once more, which the lease makes harmless.
            logger.warning("could not clear published outbox rows", ["error": .string("\(error)")])
        }
        return acknowledged.count
    }
}
