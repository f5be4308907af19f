import AppStore
import Credits
import Crypto
import Foundation
import Pipeline
import ServiceRuntime
import Webhooks

/// Everything a fulfillment worker reads from its environment, validated at start-up.
public struct FulfillmentConfiguration: Sendable {
    public var pipeline: PipelineConfiguration
    /// `APPLE_IAP_*`: who may sign the facts the worker applies (the same settings as the ingress).
    /// `APPLE_IAP_ENV` also decides who counts as a test user: everyone on a Sandbox deployment,
    /// only users flagged `is_test_user` on a Production one.
    public var appStore: AppStoreVerifierConfiguration
    /// `PAYLOAD_ENCRYPTION_KEYS`: opens the payloads the ingress sealed (every listed key). Required.
    public var payloadCipher: PayloadCipher?
    /// Consumer group shared by all workers (`FULFILLMENT_GROUP_ID`). Default `fulfillment`.
    public var groupID: String
    /// This worker's name in leases and logs (`WORKER_ID`). Default host name and process id.
    public var workerID: String
    /// Static membership of the consumer group (`FULFILLMENT_INSTANCE_ID`, Kafka's
    /// `group.instance.id`): a worker that restarts under the same id within the session timeout
    /// (a crashed container in its pod) gets its partitions back and the group moves nothing.
    /// Must be unique among live workers. Default: the pod name (`HOSTNAME`) when running in
    /// Kubernetes (`KUBERNETES_SERVICE_HOST` set), else none (dynamic membership); empty: none.
    public var instanceID: String?
    /// How long a claimed event or task stays ours without renewal (`FULFILLMENT_LEASE_SECONDS`).
    /// The worker renews its leases every third of it while it works on them (`LeaseRenewal`),
    /// so it bounds how long a dead worker's events wait, not how long work may take. Default 10.
    public var lease: Duration
    /// Attempts before an event is DEAD (`FULFILLMENT_MAX_ATTEMPTS`). Default 8.
    public var maxAttempts: Int
    /// First retry delay; doubles per attempt, full jitter (`FULFILLMENT_RETRY_BASE_MS`). Default 1000.
    public var retryBase: Duration
    /// Longest retry delay (`FULFILLMENT_RETRY_MAX_MS`). Default 300000.
    public var retryMax: Duration
    /// Events processed at once by this worker, over all its partitions (`FULFILLMENT_CONCURRENCY`).
    /// Default 64: the events in flight share claims and transactions (`FulfillmentBatches`), so
    /// more at once make bigger batches, not more connections; with several events per partition
    /// in flight, 64 lets a worker holding a dozen partitions keep ~5 of each going, and fills one
    /// full batch (`FulfillmentBatches` caps a batch at 64 events).
    public var concurrency: Int
    /// Events of one partition processed at once (`FULFILLMENT_IN_FLIGHT_PER_PARTITION`), never
    /// two of one chain (the message key): chains stay in order. Default 16; 1 is strict offset order.
    public var inFlightPerPartition: Int
    /// Port of `/healthz` and `/metrics` (`FULFILLMENT_HTTP_PORT`; 0 picks a free one). Default 8081.
    public var httpPort: Int
    /// Address of that endpoint (`FULFILLMENT_HTTP_HOST`). Default 0.0.0.0.
    public var httpHost: String
    /// `/healthz` fails when the consumer's poll loop has not turned for this long; `/readyz`
    /// when its partitions hold work and nothing was handled for this long
    /// (`FULFILLMENT_STALL_SECONDS`). Default 60.
    public var stall: Duration
    /// Period of the backlog gauges, sampled by one worker at a time (`METRICS_SAMPLE_SECONDS`).
    /// Default 15.
    public var metricsSample: Duration
    /// Re-queries, recoveries, consumption answers and stale orders (`FULFILLMENT_*` of
    /// SchedulerConfiguration, App Store Server API `APPLE_IAP_*`).
    public var schedulers: SchedulerConfiguration
    /// `WELCOME_CREDITS`, `CREDITS_SCHEDULER_*`: the credit jobs this worker runs (see `CreditsConfiguration`).
    public var credits: CreditsConfiguration
    /// `EVENT_RETENTION_*`, `EVENT_PARTITIONS_AHEAD`, `PAYLOAD_RETENTION_DAYS`: the event table's
    /// months (see `EventRetentionConfiguration`).
    public var retention: EventRetentionConfiguration
    /// `WEBHOOK_*`, `OUTBOUND_EVENT_TOPIC`: the webhook delivery this process runs (see `WebhookConfiguration`).
    public var webhooks: WebhookConfiguration
    /// Whether this process consumes the event topic and runs the schedulers (`FULFILLMENT_ENABLED`,
    /// default true). False with webhook delivery on makes a delivery-only pod of the same image.
    public var fulfillmentEnabled: Bool
    /// Test-only fault injection (`FULFILLMENT_CRASH_POINT`, `FULFILLMENT_CRASH_MARKER`): see `CrashPoint`.
    public var crashPoint: CrashPoint?

    public init(reader: ConfigurationReader) {
        pipeline = PipelineConfiguration(reader: reader)
        appStore = AppStoreVerifierConfiguration.read(from: reader)
        payloadCipher = PayloadCipher(reader: reader)
        groupID = reader.string("FULFILLMENT_GROUP_ID", default: "fulfillment")
        workerID = reader.string(
            "WORKER_ID", default: "\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)")
        let inKubernetes = !(reader.environment["KUBERNETES_SERVICE_HOST"] ?? "").isEmpty
        let instance = reader.environment["FULFILLMENT_INSTANCE_ID"] ?? (inKubernetes ? reader.environment["HOSTNAME"] : nil)
        instanceID = instance.flatMap { $0.isEmpty ? nil : $0 }
        if let instanceID, instanceID.count > 249 {
            reader.report("FULFILLMENT_INSTANCE_ID", instanceID, "at most 249 characters")
        }
        lease = .seconds(reader.int("FULFILLMENT_LEASE_SECONDS", default: 10, range: 2...3600))
        maxAttempts = reader.int("FULFILLMENT_MAX_ATTEMPTS", default: 8, range: 1...1000)
        retryBase = .milliseconds(reader.int("FULFILLMENT_RETRY_BASE_MS", default: 1000, range: 1...3_600_000))
        retryMax = .milliseconds(reader.int("FULFILLMENT_RETRY_MAX_MS", default: 300_000, range: 1...86_400_000))
        concurrency = reader.int("FULFILLMENT_CONCURRENCY", default: 64, range: 1...1024)
        inFlightPerPartition = reader.int("FULFILLMENT_IN_FLIGHT_PER_PARTITION", default: 16, range: 1...1024)
        httpPort = reader.int("FULFILLMENT_HTTP_PORT", default: 8081, range: 0...65_535)
        httpHost = reader.string("FULFILLMENT_HTTP_HOST", default: "0.0.0.0")
        stall = .seconds(reader.int("FULFILLMENT_STALL_SECONDS", default: 60, range: 5...3600))
        metricsSample = .seconds(reader.int("METRICS_SAMPLE_SECONDS", default: 15, range: 1...3600))
        schedulers = SchedulerConfiguration(reader: reader)
        credits = CreditsConfiguration(reader: reader)
        retention = EventRetentionConfiguration(reader: reader)
        webhooks = WebhookConfiguration(reader: reader)
        crashPoint = CrashPoint.read(from: reader)
        fulfillmentEnabled = reader.bool("FULFILLMENT_ENABLED", default: true)
        if !fulfillmentEnabled, !(webhooks.deliveryEnabled && pipeline.outboundEventsEnabled) {
            reader.report(
                "FULFILLMENT_ENABLED", "false",
                "a process without fulfillment must deliver webhooks (WEBHOOK_DELIVERY_ENABLED and OUTBOUND_EVENTS_ENABLED true)")
        }
    }

    public static func load(environment: [String: String]) throws(ConfigurationError) -> FulfillmentConfiguration {
        let reader = ConfigurationReader(environment: environment)
        let configuration = FulfillmentConfiguration(reader: reader)
        try reader.validate()
        return configuration
    }
}
