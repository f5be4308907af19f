import Crypto
import Dispatch
import Domain
import Foundation
import OutboundHTTP
import Storage

/// Registering and rotating webhook endpoints, shared by the admin API and `subsctl webhooks`:
/// the body's checks, the URL's address policy, a new secret sealed under the payload keys.
public struct WebhookRegistration: Sendable {
    /// Why a registration was refused: a malformed field, or a URL outside the address policy.
    public enum Refusal: Error, Sendable, Equatable {
        case invalid(String)
        case urlRefused(String)
    }

    public let store: WebhookStore
    public let cipher: PayloadCipher
    public let configuration: WebhookConfiguration

    public init(store: WebhookStore, cipher: PayloadCipher, configuration: WebhookConfiguration) {
        self.store = store
        self.cipher = cipher
        self.configuration = configuration
    }

    /// Registers an endpoint; returns it as stored and its secret (shown this once).
    public func register(
        url: String?, eventTypes: [String]?, environments: [String]?, description: String?, operator operatorName: String
    ) async throws -> (endpoint: WebhookStore.Endpoint, secret: String) {
        guard let url else { throw Refusal.invalid("url is required") }
        let known = OutboundEventType.allCases.map(\.rawValue)
        if let eventTypes, eventTypes.isEmpty || !eventTypes.allSatisfy(known.contains) {
            throw Refusal.invalid("eventTypes must list outbound event types: \(known.joined(separator: ", "))")
        }
        if let environments, environments.isEmpty || !environments.allSatisfy(["Production", "Sandbox"].contains) {
            throw Refusal.invalid("environments must list Production and/or Sandbox")
        }
        if let description, description.count > 500 { throw Refusal.invalid("description must be at most 500 characters") }
        let policy = AddressPolicy(allowHTTP: configuration.allowHTTP, allowPrivateNetworks: configuration.allowPrivateNetworks)
        // The check resolves the host name: a blocking call, kept off the cooperative pool.
        let refusal = await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: policy.refusal(url: url)) }
        }
        if let refusal { throw Refusal.urlRefused(refusal) }
        let id = "wh_" + Hex.encode(SecureRandom.bytes(12))
        let secret = WebhookSigning.newSecret()
        try await store.create(
            WebhookStore.Endpoint(
                id: id, url: url, eventTypes: eventTypes.map { Array(Set($0)).sorted() },
                environments: environments.map { Array(Set($0)).sorted() }, description: description,
                secret: try WebhookSigning.seal(secret, endpointID: id, cipher: cipher)),
            operator: operatorName)
        guard let stored = try await store.endpoint(id) else { throw Refusal.invalid("endpoint \(id) vanished") }
        return (stored, secret)
    }

    /// Gives the endpoint a new secret (returned, shown this once); the old one signs beside it for
    /// `WEBHOOK_SECRET_OVERLAP_HOURS`. Nil when there is no such live endpoint.
    public func rotate(_ id: String, operator operatorName: String, reason: String) async throws
        -> (secret: String, endpoint: WebhookStore.Endpoint)?
    {
        let secret = WebhookSigning.newSecret()
        guard
            try await store.rotate(
                id, to: try WebhookSigning.seal(secret, endpointID: id, cipher: cipher), overlap: configuration.secretOverlap,
                operator: operatorName, reason: reason),
            let endpoint = try await store.endpoint(id)
        else { return nil }
        return (secret, endpoint)
    }
}

/// An endpoint as the admin API and `subsctl` show it: never its secret, except in the answer to
/// its registration.
public struct WebhookEndpointSummary: Encodable, Sendable {
    public let id: String
    public let url: String
    public let eventTypes: [String]?
    public let environments: [String]?
    public let description: String?
    public let createdAt: Date
    public let deletedAt: Date?
    /// Until when the secret a rotation replaced still signs, while it does.
    public let previousSecretExpiresAt: Date?
    /// Shown once, in the answer to the registration.
    public let secret: String?

    public init(_ endpoint: WebhookStore.Endpoint, secret: String? = nil, now: Date = Date()) {
        id = endpoint.id
        url = endpoint.url
        eventTypes = endpoint.eventTypes
        environments = endpoint.environments
        description = endpoint.description
        createdAt = endpoint.createdAt
        deletedAt = endpoint.deletedAt
        previousSecretExpiresAt = endpoint.previousSecretExpiresAt.flatMap { $0 > now ? $0 : nil }
        self.secret = secret
    }
}
