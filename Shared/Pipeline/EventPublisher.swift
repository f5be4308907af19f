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
    public let outbox: OutboxStore
    public let logger: Logger
    private let deletions: GroupCommit<[Int64], Void>
    private let published = MetricsRegistry.shared.counter(
        "subs_outbox_published_total", help: "Outbox messages acknowledged by the broker")
    private let failed = MetricsRegistry.shared.counter(
        "subs_outbox_publish_failures_total", help: "Outbox messages the broker did not acknowledge (retried by the relay)")

    public init(producer: KafkaProducer, outbox: OutboxStore, logger: Logger) {
        self.producer = producer
        self.outbox = outbox
        self.logger = logger
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
                        // Every message fails while the broker is away: one line per window says so.
                        if let suppressed = LogThrottle.shared.admit("publish-failed") {
                            logger.warning(
                                "publish failed, left for the outbox relay",
                                [
                                    "event.id": .int(entry.envelope.eventID), "error": .string("\(error)"),
                                    "kafka.suppressed": .int(Int64(suppressed)),
                                ])
                        }
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
