import Foundation
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
    /// Where every verified App Store Server Notification is forwarded, as Apple sent it
    /// (`APPLE_NOTIFICATION_FORWARD_URL`); Sandbox's too unless the next is set. Default none.
    public var forwardURL: String?
    /// Where Sandbox's (and Xcode's) notifications go instead (`APPLE_NOTIFICATION_FORWARD_SANDBOX_URL`).
    public var forwardSandboxURL: String?
    /// The forwarding's consumer group over the event topic (`APPLE_NOTIFICATION_FORWARD_CONSUMER_GROUP`).
    /// Default `subscriptions-apple-forward`.
    public var forwardGroupID: String

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
        forwardGroupID = reader.string("APPLE_NOTIFICATION_FORWARD_CONSUMER_GROUP", default: "subscriptions-apple-forward")
        let allowHTTP = allowHTTP
        func forwardTarget(_ name: String) -> String? {
            guard let value = reader.optionalString(name), !value.isEmpty else { return nil }
            // The address checks (private networks, metadata) run at connect time, as for webhooks;
            // a URL that can never be sent to is refused here, at start-up.
            let scheme = URLComponents(string: value)?.scheme?.lowercased()
            guard URLComponents(string: value)?.host?.isEmpty == false, scheme == "https" || (allowHTTP && scheme == "http") else {
                reader.report(name, value, allowHTTP ? "an http(s):// URL" : "an https:// URL (http:// needs WEBHOOK_ALLOW_HTTP=true)")
                return nil
            }
            return value
        }
        forwardURL = forwardTarget("APPLE_NOTIFICATION_FORWARD_URL")
        forwardSandboxURL = forwardTarget("APPLE_NOTIFICATION_FORWARD_SANDBOX_URL")
        if forwardSandboxURL != nil && forwardURL == nil {
            reader.report(
                "APPLE_NOTIFICATION_FORWARD_URL", nil, "a URL when APPLE_NOTIFICATION_FORWARD_SANDBOX_URL is set (Production's go there)")
        }
    }

    /// Whether notifications of `environment` are forwarded (the ingress then keeps a body that is
    /// not the compact rebuild of its payload, so the target receives Apple's exact bytes).
    public func forwards(environment: String) -> Bool {
        forwardTargets.contains { $0.environments?.contains(environment) ?? true }
    }

    /// The forwarding targets: (endpoint id, URL, environments; nil for every environment).
    /// Apple allows one URL per environment; Xcode's and StoreKit testing's follow Sandbox's.
    public var forwardTargets: [(id: String, url: String, environments: [String]?)] {
        guard let forwardURL else { return [] }
        guard let forwardSandboxURL else { return [(Self.forwardEndpointID, forwardURL, nil)] }
        return [
            (Self.forwardEndpointID, forwardURL, ["Production"]),
            (Self.forwardSandboxEndpointID, forwardSandboxURL, ["Sandbox", "Xcode", "LocalTesting"]),
        ]
    }

    /// The endpoint ids of the forwarding targets, fixed so the admin API and `subsctl webhooks
    /// deliveries` find them (hex like every webhook id: `af` for Apple forward).
    public static let forwardEndpointID = "wh_af0000000000000000000001"
    public static let forwardSandboxEndpointID = "wh_af0000000000000000000002"
}
