import Crypto
import Foundation
import Kafka
import Pipeline
import ServiceRuntime
import Storage
import Synchronization
import Webhooks

/// Webhook delivery: a consumer group of its own over `OUTBOUND_EVENT_TOPIC` that writes a delivery
/// row per matching endpoint for each event (its offset committed after that), and the sender that
/// delivers the rows. Apart from fulfillment's consumer and connections, so a slow or dead endpoint
/// never delays fulfillment; runnable alone (`WEBHOOK_DELIVERY_ENABLED`).
public struct WebhookDelivery: Sendable {
    /// The fields of an outbound event the delivery reads; the rest is sent as it came.
    struct EventHead: Decodable {
        let id: String
        let type: String
        let environment: String
    }

    public let consumer: KafkaConsumer
    public let sender: WebhookSender

    public init(
        store: WebhookStore, cipher: PayloadCipher, configuration: WebhookConfiguration, kafka: KafkaConfiguration,
        topic: String, owner: String, sampleInterval: Duration = .seconds(15), closeTimeout: Duration = .seconds(10), logger: Logger
    ) throws {
        let sender = WebhookSender(
            store: store, cipher: cipher, configuration: configuration, owner: owner, sampleInterval: sampleInterval,
            logger: logger)
        var consumerConfiguration = KafkaConsumerConfiguration(
            kafka: kafka, groupID: configuration.groupID, topics: [topic], maxConcurrentPartitions: 8)
        consumerConfiguration.maxInFlightPerPartition = 16
        consumerConfiguration.closeTimeout = closeTimeout
        let logger = logger.with(["component": .string("webhooks")])
        let batcher = EnqueueBatcher<WebhookStore.IncomingEvent>(sender: sender) { try await store.enqueue($0) }
        consumer = try KafkaConsumer(configuration: consumerConfiguration, logger: logger) { message in
            guard let head = try? JSONDecoder().decode(EventHead.self, from: Data(message.value)) else {
                // Nothing to deliver in a message that is not an event; retrying would not change it.
                logger.warning(
                    "outbound event unreadable; skipped",
                    ["kafka.partition": .int(Int64(message.partition)), "kafka.offset": .int(message.offset)])
                return
            }
            try await batcher.enqueue(
                WebhookStore.IncomingEvent(id: head.id, type: head.type, environment: head.environment, payload: message.value))
        }
        self.sender = sender
    }

    /// The sender first: stopped after the consumer, it records what is in flight.
    public var services: [any Service] { [sender, consumer] }
}

/// Writes the events the consumer's handlers hand in together: while one statement runs, the
/// events arriving wait and go in the next one, so a busy topic costs one INSERT per batch, not per
/// event. Each handler returns (and its offset may be committed) once its event's rows are written.
/// `write` returns the delivery rows it added (the sender is woken when there are any).
final class EnqueueBatcher<Event: Sendable>: Sendable {
    struct Waiting {
        let event: Event
        let continuation: CheckedContinuation<Void, any Error>
    }

    let write: @Sendable ([Event]) async throws -> Int
    let sender: WebhookSender
    /// The events waiting, and whether a statement is running (its task takes them next).
    let state = Mutex<(waiting: [Waiting], writing: Bool)>(([], false))

    init(sender: WebhookSender, write: @escaping @Sendable ([Event]) async throws -> Int) {
        self.write = write
        self.sender = sender
    }

    func enqueue(_ event: Event) async throws {
        try await withCheckedThrowingContinuation { continuation in
            let lead = state.withLock { state in
                state.waiting.append(Waiting(event: event, continuation: continuation))
                defer { state.writing = true }
                return !state.writing
            }
            if lead { Task { await self.drain() } }
        }
    }

    func drain() async {
        while true {
            let batch: [Waiting] = state.withLock { state in
                defer { state.waiting.removeAll() }
                if state.waiting.isEmpty { state.writing = false }
                return state.waiting
            }
            guard !batch.isEmpty else { return }
            do {
                if try await write(batch.map(\.event)) > 0 { sender.wake() }
                for waiting in batch { waiting.continuation.resume() }
            } catch {
                for waiting in batch { waiting.continuation.resume(throwing: error) }
            }
        }
    }
}
