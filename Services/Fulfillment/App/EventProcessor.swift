import Events
import Foundation
import Kafka
import Postgres
import ServiceRuntime
import Storage

/// How a failed attempt continues.
public enum ProcessingFailure: Error, Sendable {
    /// Try again later (database, network, Apple API, OCSP); the code names the error class.
    case retryable(code: String, message: String)
    /// Never succeeds (bad signature, wrong app): DEAD at once.
    case permanent(code: String, message: String)
}

/// Applies one event under a lease: claim, one transaction of effects, complete; then the consumer
/// stores the offset. Everything that can be retried is retried through the database, not Kafka.
public struct EventProcessor: Sendable {
    public let store: EventStore
    public let configuration: FulfillmentConfiguration
    public let logger: Logger
    private let outcomes: [String: Counter]
    private let duration = MetricsRegistry.shared.histogram(
        "subs_fulfillment_processing_seconds", help: "Time from claim to commit of one event")

    public init(store: EventStore, configuration: FulfillmentConfiguration, logger: Logger) {
        self.store = store
        self.configuration = configuration
        self.logger = logger
        outcomes = Dictionary(
            uniqueKeysWithValues: ["succeeded", "retry", "dead", "skipped", "invalid_message"].map {
                ($0, MetricsRegistry.shared.counter(
                    "subs_fulfillment_events_total", help: "Events handled by outcome", labels: ["outcome": $0]))
            })
    }

    /// Kafka handler. Returns normally once the event's fate is recorded in PostgreSQL; throws only
    /// when PostgreSQL itself is unreachable, so the consumer redelivers the message later.
    public func handle(_ message: KafkaMessage) async throws {
        guard let envelope = EventEnvelope.decode(message.value) else {
            // Not ours to interpret; skipping loses nothing because PostgreSQL holds every event.
            outcomes["invalid_message"]!.increment()
            logger.warning(
                "message is not an event envelope, skipped",
                ["kafka.partition": .int(Int64(message.partition)), "kafka.offset": .int(message.offset)])
            return
        }
        let owner = configuration.workerID
        guard let event = try await store.claim(envelope, owner: owner, lease: configuration.lease) else {
            // Done, leased by a live worker, or waiting for its retry time: the sweeper brings it back if needed.
            outcomes["skipped"]!.increment()
            return
        }
        let started = ContinuousClock.now
        let log = logger.with(["event.id": .int(event.id), "trace.id": .string(event.traceID ?? "")])
        do {
            let applied = try await store.pool.transaction { connection in
                guard try await store.lockLease(of: event, owner: owner, on: connection) else { return false }
                try await store.complete(event, owner: owner, on: connection)
                return true
            }
            duration.observe(since: started)
            if applied {
                outcomes["succeeded"]!.increment()
                log.debug("event applied")
            } else {
                outcomes["skipped"]!.increment()
                log.info("lease lost before commit, left to its new owner")
            }
        } catch let failure as ProcessingFailure {
            try await record(failure, for: event, log: log)
        } catch let error as PostgresError where error.isRetryable {
            try await record(.retryable(code: "RETRYABLE_DATABASE", message: "\(error)"), for: event, log: log)
        } catch {
            try await record(.retryable(code: "FULFILLMENT_FAILED", message: "\(error)"), for: event, log: log)
        }
    }

    private func record(_ failure: ProcessingFailure, for event: ClaimedEvent, log: Logger) async throws {
        switch failure {
        case .retryable(let code, let message) where event.retryCount + 1 < configuration.maxAttempts:
            let delay = RetryPolicy.delay(
                attempt: event.retryCount + 1, base: configuration.retryBase, max: configuration.retryMax)
            try await store.fail(event, owner: configuration.workerID, code: code, message: message, retryAt: delay)
            outcomes["retry"]!.increment()
            log.warning("event will be retried", ["error.code": .string(code), "retry.attempt": .int(Int64(event.retryCount + 1))])
        case .retryable(let code, let message), .permanent(let code, let message):
            try await store.fail(event, owner: configuration.workerID, code: code, message: message, retryAt: nil)
            outcomes["dead"]!.increment()
            log.error("event is dead", ["error.code": .string(code)])
        }
    }
}

/// Exponential backoff with full jitter: a uniformly random delay up to base·2^(attempt-1), capped.
public enum RetryPolicy {
    public static func delay(attempt: Int, base: Duration, max: Duration) -> Duration {
        let exponent = Swift.min(attempt - 1, 30)
        let ceiling = Swift.min(seconds(base) * pow(2, Double(exponent)), seconds(max))
        return .milliseconds(Int64(Double.random(in: 0...ceiling) * 1000))
    }

    static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }
}
