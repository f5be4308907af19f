import Crypto
import Dispatch
import Events
import Foundation
import Kafka
import OutboundHTTP
import Pipeline
import ServiceRuntime
import Storage
import Webhooks

/// Forwarding of Apple's notifications (`APPLE_NOTIFICATION_FORWARD_URL`, `_SANDBOX_URL`): a
/// consumer group of its own over the event topic the workers consume, so a notification is
/// forwarded only once the ingress stored it (only verified ones are) and never delays Apple's 200.
/// Each becomes a delivery to the target of its environment, written before the offset is
/// committed (a crash reads it again; the delivery's key drops the repeat), and the webhook sender
/// delivers it: same retries, DEAD state, address policy and admin views as a webhook.
/// Without a target it only removes the targets configured before, and reads nothing.
public final class AppleForwarding: Service, Sendable {
    public let name = "apple-forward"
    let consumer: KafkaConsumer?
    let store: WebhookStore
    let cipher: PayloadCipher
    let configuration: WebhookConfiguration
    let logger: Logger
    let stopping = ShutdownTrigger()

    public init(
        store: WebhookStore, cipher: PayloadCipher, configuration: WebhookConfiguration, kafka: KafkaConfiguration, topic: String,
        sender: WebhookSender, closeTimeout: Duration = .seconds(10), logger: Logger
    ) throws {
        self.store = store
        self.cipher = cipher
        self.configuration = configuration
        let logger = logger.with(["component": .string("apple-forward")])
        self.logger = logger
        var consumerConfiguration = KafkaConsumerConfiguration(
            kafka: kafka, groupID: configuration.forwardGroupID, topics: [topic], maxConcurrentPartitions: 8)
        consumerConfiguration.maxInFlightPerPartition = 16
        consumerConfiguration.closeTimeout = closeTimeout
        let unopened = MetricsRegistry.shared.counter(
            "subs_apple_forward_unreadable_total",
            help: "Stored notifications not forwarded because their sealed payload does not open (its key is no longer listed)")
        let batcher = EnqueueBatcher<Int64>(sender: sender) { eventIDs in
            var events: [WebhookStore.IncomingEvent] = []
            for notification in try await store.notificationsToForward(eventIDs) {
                do {
                    events.append(
                        WebhookStore.IncomingEvent(
                            id: notification.notificationUUID, type: notification.type, environment: notification.environment,
                            payload: try notification.requestBody(cipher: cipher)))
                } catch {
                    unopened.increment()
                    logger.warning(
                        "notification not forwarded: its payload does not open",
                        ["appstore.notification_uuid": .string(notification.notificationUUID), "error": .string("\(error)")])
                }
            }
            return try await store.enqueue(events, kind: .appleForward)
        }
        guard !configuration.forwardTargets.isEmpty else {
            consumer = nil
            return
        }
        consumer = try KafkaConsumer(configuration: consumerConfiguration, logger: logger) { message in
            // Submissions share the topic; only Apple's notifications are forwarded.
            guard let envelope = try? JSONDecoder().decode(EventEnvelope.self, from: Data(message.value)),
                envelope.kind == .notification
            else { return }
            try await batcher.enqueue(envelope.eventID)
        }
    }

    public func run() async throws {
        // The targets as configured, before the first notification is read; retried while the
        // database is unreachable.
        while !stopping.isFired {
            do {
                try await configureTargets()
                break
            } catch {
                logger.warning("forwarding targets not written yet", ["error": .string("\(error)")])
                _ = await stopping.wait(timeout: .seconds(2))
            }
        }
        guard let consumer else {
            await stopping.wait()
            return
        }
        guard !stopping.isFired else { return }
        try await consumer.run()
    }

    func configureTargets() async throws {
        let policy = AddressPolicy(allowHTTP: configuration.allowHTTP, allowPrivateNetworks: configuration.allowPrivateNetworks)
        var targets: [(id: String, url: String, environments: [String]?, secret: WebhookStore.SealedSecret)] = []
        for target in configuration.forwardTargets {
            // Resolving the host blocks: off the cooperative pool. A refusal is said now; the
            // deliveries would fail at connect time with the same reason.
            let refusal = await withCheckedContinuation { continuation in
                DispatchQueue.global().async { continuation.resume(returning: policy.refusal(url: target.url)) }
            }
            if let refusal {
                logger.error("forwarding target refused by the address policy", ["url": .string(target.url), "reason": .string(refusal)])
            }
            let secret = try WebhookSigning.seal(WebhookSigning.newSecret(), endpointID: target.id, cipher: cipher)
            targets.append((target.id, target.url, target.environments, secret))
        }
        try await store.configureForwards(targets, operator: "configuration")
    }

    public func shutdownRequested() {
        stopping.fire()
        consumer?.shutdownRequested()
    }

    public func shutdown() async {
        stopping.fire()
        await consumer?.shutdown()
    }
}
