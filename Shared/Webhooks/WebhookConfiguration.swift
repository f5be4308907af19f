import ServiceRuntime

/// The webhooks' settings (`WEBHOOK_*`, `OUTBOUND_EVENT_TOPIC`), read by the ingress (registration
/// checks, rotation overlap) and the fulfillment executable (delivery).
public struct WebhookConfiguration: Sendable {
    /// Whether this fulfillment process delivers webhooks (`WEBHOOK_DELIVERY_ENABLED`). Default true.
    public var deliveryEnabled: Bool
    /// The delivery's consumer group, apart from fulfillment's (`WEBHOOK_CONSUMER_GROUP`). Default `subscriptions-webhooks`.
    public var groupID: String
    /// First retry delay; doubles per attempt, full jitter (`WEBHOOK_RETRY_BASE_MS`). Default 5000.
    public var retryBase: Duration
    /// Longest retry delay (`WEBHOOK_RETRY_MAX_MS`). Default 3600000.
    public var retryMax: Duration
    /// Attempts before a delivery is DEAD (`WEBHOOK_MAX_ATTEMPTS`). Default 12.
    public var maxAttempts: Int
    /// Bound on one attempt, connect to last byte (`WEBHOOK_TIMEOUT_MS`). Default 10000.
    public var timeout: Duration
    /// Requests in flight from this process, over all endpoints (`WEBHOOK_CONCURRENCY`). Default 32.
    public var concurrency: Int
    /// Requests in flight to one endpoint, over all processes (`WEBHOOK_ENDPOINT_CONCURRENCY`):
    /// below `WEBHOOK_CONCURRENCY`, so a slow endpoint leaves senders to the others. Default 8.
    public var endpointConcurrency: Int
    /// `http://` URLs (`WEBHOOK_ALLOW_HTTP`). Default false.
    public var allowHTTP: Bool
    /// Loopback, private, link-local and metadata addresses (`WEBHOOK_ALLOW_PRIVATE_NETWORKS`). Default false.
    public var allowPrivateNetworks: Bool
    /// How long a rotated-out secret still signs beside the new one (`WEBHOOK_SECRET_OVERLAP_HOURS`). Default 24.
    public var secretOverlap: Duration

    public init(reader: ConfigurationReader) {
        deliveryEnabled = reader.bool("WEBHOOK_DELIVERY_ENABLED", default: true)
        groupID = reader.string("WEBHOOK_CONSUMER_GROUP", default: "subscriptions-webhooks")
        retryBase = .milliseconds(reader.int("WEBHOOK_RETRY_BASE_MS", default: 5000, range: 1...86_400_000))
        retryMax = .milliseconds(reader.int("WEBHOOK_RETRY_MAX_MS", default: 3_600_000, range: 1...604_800_000))
        maxAttempts = reader.int("WEBHOOK_MAX_ATTEMPTS", default: 12, range: 1...100)
        timeout = .milliseconds(reader.int("WEBHOOK_TIMEOUT_MS", default: 10_000, range: 100...300_000))
        concurrency = reader.int("WEBHOOK_CONCURRENCY", default: 32, range: 1...1024)
        endpointConcurrency = reader.int("WEBHOOK_ENDPOINT_CONCURRENCY", default: 8, range: 1...1024)
        allowHTTP = reader.bool("WEBHOOK_ALLOW_HTTP", default: false)
        allowPrivateNetworks = reader.bool("WEBHOOK_ALLOW_PRIVATE_NETWORKS", default: false)
        secretOverlap = .seconds(3600 * reader.int("WEBHOOK_SECRET_OVERLAP_HOURS", default: 24, range: 0...720))
    }
}
