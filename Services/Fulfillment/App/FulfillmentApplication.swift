import AppStore
import Credits
import HTTPServer
import Kafka
import Pipeline
import Postgres
import ServiceRuntime
import Storage
import Webhooks

/// The worker process: consumer group member, processor, and the pipeline sweeper.
public struct FulfillmentApplication: Sendable {
    public let configuration: FulfillmentConfiguration
    public let pool: PostgresPool
    public let producer: KafkaProducer
    public let consumer: KafkaConsumer
    public let sweeper: PipelineSweeper
    /// Publishes the outbound events to `OUTBOUND_EVENT_TOPIC` (with `OUTBOUND_EVENTS_ENABLED=false`,
    /// marks the few still recorded handled instead).
    public let outboundRelay: OutboundRelay
    /// Stale orders, disagreeing chains, re-queries and notification-history recoveries.
    let scheduler: Scheduler
    let subscriptionClock: SubscriptionClockService
    /// Daily close, expiry clearing, yearly months, welcome credits, the ledger check.
    public let credits: CreditsScheduler
    /// `/healthz`, `/readyz` and `/metrics` (Prometheus text) for the orchestrator and the alerts.
    public let operations: HTTPServer
    /// The backlog gauges, in one worker at a time.
    let sampler: BacklogSampler
    /// The event table's months: partitions ahead, payload redaction, old months detached.
    let retention: EventRetention
    /// Promotional grants ended at their expiry, with their events.
    let grantExpiry: PromotionalGrantExpiry
    /// The heartbeat of the leases on the events and tasks this worker is working on.
    let renewal: LeaseRenewal
    /// What the probes say of the schema while the worker waits for its migrations.
    let schema = SchemaGate()
    /// Webhook delivery (nil with `WEBHOOK_DELIVERY_ENABLED=false`, or with no outbound events to
    /// deliver: `OUTBOUND_EVENTS_ENABLED=false` creates no topic to consume).
    public let webhooks: WebhookDelivery?
    /// Forwarding of Apple's notifications, delivered by the webhook sender (nil with it).
    public let forwarding: AppleForwarding?
    public let logger: Logger

    public init(configuration: FulfillmentConfiguration, logger: Logger, clock: any WallClock = SystemClock()) throws {
        let logger = logger.with(["worker.id": .string(configuration.workerID)])
        self.configuration = configuration
        self.logger = logger
        pool = PostgresPool(configuration: configuration.pipeline.postgres, logger: logger)
        producer = try KafkaProducer(
            configuration: configuration.pipeline.kafka, logger: logger,
            shutdownTimeout: configuration.pipeline.producerFlushTimeout)
        let store = EventStore(pool: pool, topic: configuration.pipeline.eventTopic)
        // `load` refuses a configuration without keys; a hand-made one must carry them.
        guard let cipher = configuration.payloadCipher else { preconditionFailure("PAYLOAD_ENCRYPTION_KEYS missing") }
        let verifier = try SignedDataVerifier(configuration: configuration.appStore, clock: clock, logger: logger)
        var processor = EventProcessor(
            leases: store, verifier: verifier, cipher: cipher, configuration: configuration, clock: clock, logger: logger)
        let clients = configuration.schedulers.appStoreAPI.map {
            AppStoreAPIClients(configuration: $0, logger: logger)
        }
        processor.consumption = ConsumptionResponder(store: ConsumptionStore(pool: pool), clients: clients, logger: logger)
        if let api = configuration.schedulers.appStoreAPI {
            processor.appTransactionLookup = AppTransactionLookup(
                clients: AppStoreAPIClients(configuration: AppTransactionLookup.limits(api), logger: logger), verifier: verifier,
                bindings: ChainBindingStore(pool: pool, topic: configuration.pipeline.eventTopic))
        }
        renewal = LeaseRenewal(events: store, owner: configuration.workerID, lease: configuration.lease, logger: logger)
        processor.renewal = renewal
        let relay = OutboundRelay(
            store: OutboundEventStore(pool: pool), producer: configuration.pipeline.outboundEventsEnabled ? producer : nil,
            topic: configuration.pipeline.outboundEventTopic, interval: configuration.pipeline.sweepInterval, logger: logger)
        outboundRelay = relay
        processor.outboundRelay = relay
        var consumerConfiguration = KafkaConsumerConfiguration(
            kafka: configuration.pipeline.kafka, groupID: configuration.groupID,
            topics: [configuration.pipeline.eventTopic], maxConcurrentPartitions: configuration.concurrency)
        consumerConfiguration.maxInFlightPerPartition = configuration.inFlightPerPartition
        consumerConfiguration.instanceID = configuration.instanceID
        // Half the grace: the services stopped after the consumer (producer, pool) keep the rest.
        consumerConfiguration.closeTimeout = configuration.pipeline.shutdownGrace / 2
        consumer = try KafkaConsumer(configuration: consumerConfiguration, logger: logger, handler: processor.handle)
        consumer.onAssignmentChange { assigned in
            logger.info(
                "partition assignment changed",
                [
                    "kafka.partitions": .string(assigned.map { "\($0.topic)/\($0.partition)" }.joined(separator: ",")),
                    "kafka.partition_count": .int(Int64(assigned.count)),
                ])
        }
        let consumer = consumer
        let jobs = CreditJobs(pool: pool, appKey: configuration.appStore.bundleId, configuration: configuration.credits, logger: logger)
        sampler = BacklogSampler(
            configuration: configuration.pipeline.postgres, interval: configuration.metricsSample, logger: logger,
            lag: { try await consumer.groupLag() }, creditsOverdue: { try await jobs.overdue(now: $0, grace: .seconds(3600)) })
        webhooks =
            configuration.webhooks.deliveryEnabled && configuration.pipeline.outboundEventsEnabled
            ? try WebhookDelivery(
                store: WebhookStore(pool: pool), cipher: cipher, configuration: configuration.webhooks,
                kafka: configuration.pipeline.kafka, topic: configuration.pipeline.outboundEventTopic, owner: configuration.workerID,
                sampleInterval: configuration.metricsSample,
                closeTimeout: configuration.pipeline.shutdownGrace / 4, logger: logger) : nil
        forwarding = try webhooks.map { webhooks in
            try AppleForwarding(
                store: webhooks.sender.store, cipher: cipher, configuration: configuration.webhooks,
                kafka: configuration.pipeline.kafka, topic: configuration.pipeline.eventTopic, sender: webhooks.sender,
                closeTimeout: configuration.pipeline.shutdownGrace / 4, logger: logger)
        }
        // A delivery-only process (`FULFILLMENT_ENABLED=false`) is judged by its delivery consumer.
        let probed = configuration.fulfillmentEnabled ? consumer : (webhooks?.consumer ?? consumer)
        let stall = configuration.stall
        let sampler = sampler
        MetricsRegistry.shared.setCollector("fulfillment") {
            [
                MetricFamily(
                    "subs_fulfillment_ready", help: "1 when this worker's /readyz answers 200",
                    value: probed.health.readiness(stall: stall).ok ? 1 : 0)
            ] + sampler.families
        }
        var router = Router()
        // While the schema is awaited the worker is alive (the start-up probe must not kill it
        // during a long migration elsewhere) and not ready, and both say what it waits for.
        let schema = schema
        router.get("/healthz") { _ in
            schema.waitingFor.map { Self.answer(.init(ok: true, reason: "schema \($0)"), schema: $0) }
                ?? Self.answer(probed.health.liveness(stall: stall))
        }
        router.get("/readyz") { _ in
            schema.waitingFor.map { Self.answer(.init(ok: false, reason: "schema \($0)"), schema: $0) }
                ?? Self.answer(probed.health.readiness(stall: stall))
        }
        router.get("/metrics") { _ in
            .text(MetricsRegistry.shared.prometheusText(), contentType: "text/plain; version=0.0.4; charset=utf-8")
        }
        operations = HTTPServer(
            // Two threads: libmicrohttpd logs a pool of one as an error and runs without a pool.
            configuration: HTTPServerConfiguration(
                host: configuration.httpHost, port: configuration.httpPort, threadPoolSize: 2, maxBodyBytes: 1024),
            router: router, logger: logger)
        let publisher = EventPublisher(producer: producer, outbox: store, logger: logger)
        scheduler = Scheduler(
            configuration: configuration, events: store, publisher: publisher, verifier: verifier, cipher: cipher,
            clients: clients, renewal: renewal, logger: logger)
        subscriptionClock = SubscriptionClockService(
            pool: pool, interval: configuration.schedulers.clockInterval, batchSize: configuration.schedulers.clockBatchSize,
            clock: clock, logger: logger)
        sweeper = PipelineSweeper(
            publisher: publisher,
            interval: configuration.pipeline.sweepInterval, stuckAfter: configuration.pipeline.stuckAfter,
            logger: logger, ensureTopic: Bootstrap.topicEnsurer(configuration: configuration.pipeline, logger: logger))
        credits = CreditsScheduler(
            jobs: jobs, clock: clock)
        retention = EventRetention(
            store: store, actor: configuration.workerID, configuration: configuration.retention,
            clock: clock, logger: logger)
        grantExpiry = PromotionalGrantExpiry(store: EntitlementStore(pool: pool), clock: clock, logger: logger)
    }

    /// Stopped in reverse: the consumer finishes its in-flight events and commits before the pool closes.
    public var services: [any Service] {
        // Delivery only: the pool, the probes and the senders; no topic of events, no schedulers.
        let delivery = (webhooks?.services ?? []) + (forwarding.map { [$0] } ?? [])
        guard configuration.fulfillmentEnabled else { return [pool, operations] + delivery }
        // The relay stops before the producer it publishes through.
        let relay: [any Service] = [outboundRelay]
        let before: [any Service] = [pool, producer, renewal, sweeper]
        let after: [any Service] = [scheduler, subscriptionClock, credits, retention, grantExpiry, sampler, operations]
        // The forwarding after the sender: stopped before it, its last rows are still sent.
        return before + relay + after + delivery + [consumer]
    }

    /// 200 or 503 with the verdict's reason, for the orchestrator's probes and for people.
    static func answer(_ verdict: KafkaConsumerHealth.Verdict, schema: String = "ok") -> HTTPResponse {
        .json(
            ["status": verdict.ok ? "ok" : "unavailable", "reason": verdict.reason, "schema": schema], status: verdict.ok ? 200 : 503)
    }

    /// Opens the probes' listener, waits for the schema (or migrates, `MIGRATE_ON_START`) and the
    /// topic, then runs until SIGTERM/SIGINT.
    public func run() async throws {
        try operations.start()
        logger.info("probes listening", ["http.port": .int(Int64(operations.port))])
        try await Bootstrap.prepare(configuration: configuration.pipeline, pool: pool, logger: logger, schema: schema)
        logger.info(
            "fulfillment worker starting",
            [
                "kafka.group": .string(configuration.groupID), "http.port": .int(Int64(operations.port)),
                "kafka.group_instance": .string(configuration.instanceID ?? ""),
            ])
        try await ServiceGroup(services: services, logger: logger, gracefulTimeout: configuration.pipeline.shutdownGrace).run()
    }
}
