import Pipeline
import Storage

/// Where the ingress hands outbox entries right after their commit. The application publishes
/// them to the broker; without one (route tests) they stay in the outbox for the relay.
public protocol OutboxPublishing: Sendable {
    /// How many were acknowledged; a failure leaves the entry in the outbox, so nothing is thrown.
    @discardableResult
    func publish(_ entries: [OutboxEntry]) async -> Int
}

extension EventPublisher: OutboxPublishing {}

/// Publishes nothing: committed events wait in the outbox.
struct OutboxOnly: OutboxPublishing {
    func publish(_ entries: [OutboxEntry]) async -> Int { 0 }
}
