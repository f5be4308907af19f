import Foundation
import Kafka
import Pipeline
import ServiceRuntime
import Storage

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
        owner: String, sampleInterval: Duration = .seconds(15), closeTimeout: Duration = .seconds(10), logger: Logger
    ) throws {
        let sender = WebhookSender(
            store: store, cipher: cipher, configuration: configuration, owner: owner, sampleInterval: sampleInterval,
            logger: logger)
        var consumerConfiguration = KafkaConsumerConfiguration(
            kafka: kafka, groupID: configuration.groupID, topics: [configuration.topic], maxConcurrentPartitions: 8)
        consumerConfiguration.maxInFlightPerPartition = 16
        consumerConfiguration.closeTimeout = closeTimeout
        let logger = logger.with(["component": .string("webhooks")])
        consumer = try KafkaConsumer(configuration: consumerConfiguration, logger: logger) { message in
            guard let head = try? JSONDecoder().decode(EventHead.self, from: Data(message.value)) else {
                // Nothing to deliver in a message that is not an event; retrying would not change it.
                logger.warning(
                    "outbound event unreadable; skipped",
                    ["kafka.partition": .int(Int64(message.partition)), "kafka.offset": .int(message.offset)])
                return
            }
            if try await store.enqueue(eventID: head.id, type: head.type, environment: head.environment, payload: message.value)
                > 0
            {
                sender.wake()
            }
        }
        self.sender = sender
    }

    /// The sender first: stopped after the consumer, it records what is in flight.
    public var services: [any Service] { [sender, consumer] }
}
