import AppStore
import Credits
import Foundation
import Pipeline
import ServiceRuntime

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
    /// How long a claimed event stays ours (`FULFILLMENT_LEASE_SECONDS`). Default 30.
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
    /// Test-only fault injection (`FULFILLMENT_CRASH_POINT`, `FULFILLMENT_CRASH_MARKER`): see `CrashPoint`.
    public var crashPoint: CrashPoint?

    public init(reader: ConfigurationReader) {
        pipeline = PipelineConfiguration(reader: reader)
        appStore = AppStoreVerifierConfiguration.read(from: reader)
        payloadCipher = PayloadCipher(reader: reader)
        groupID = reader.string("FULFILLMENT_GROUP_ID", default: "fulfillment")
        workerID = reader.string(
            "WORKER_ID", default: "\(ProcessInfo.processInfo.hostName)-\(ProcessInfo.processInfo.processIdentifier)")
        lease = .seconds(reader.int("FULFILLMENT_LEASE_SECONDS", default: 30, range: 1...3600))
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
        crashPoint = CrashPoint.read(from: reader)
    }

    public static func load(environment: [String: String]) throws(ConfigurationError) -> FulfillmentConfiguration {
        let reader = ConfigurationReader(environment: environment)
        let configuration = FulfillmentConfiguration(reader: reader)
        try reader.validate()
        return configuration
    }
}
