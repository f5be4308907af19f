import AppStore
import Credits
import Crypto
import Domain
import Events
import Foundation
import Kafka
import Pipeline
import Postgres
import ServiceRuntime
import Storage

/// Applies one event under a lease: claim, open and verify, one transaction of effects (or of the
/// refusal), complete; wake the waiting ingress; then the consumer stores the offset. Everything
/// that can be retried is retried through the database, not Kafka. The claim and the transaction
/// are shared with the events other partitions handle at the same moment (`FulfillmentBatches`).
public struct EventProcessor: Sendable {
    public let configuration: FulfillmentConfiguration
    public let logger: Logger
    let leases: EventStore
    let store: FulfillmentStore
    let reader: EventReader
    let notifier: FulfillmentNotifier
    let batches: FulfillmentBatches
    let clock: any WallClock
    /// Answers CONSUMPTION_REQUEST before the event completes (set by the application).
    var consumption: ConsumptionResponder?
    /// Asks Apple for the Apple Account of a token-less transaction signed without one (set by
    /// the application when the App Store Server API is configured).
    var appTransactionLookup: AppTransactionLookup?
    /// Extends the lease of the event while it is worked on (set by the application).
    var renewal: LeaseRenewal?
    /// Publishes the outbound events a commit wrote (set by the application when they are on).
    var outboundRelay: OutboundRelay?
    private let metrics = ProcessorMetrics()

    public init(
        leases: EventStore, verifier: SignedDataVerifier, cipher: PayloadCipher, configuration: FulfillmentConfiguration,
        clock: any WallClock = SystemClock(), logger: Logger
    ) {
        self.leases = leases
        self.configuration = configuration
        self.logger = logger
        self.clock = clock
        store = FulfillmentStore(
            leases: leases, appKey: configuration.appStore.bundleId,
            everyoneIsTestUser: configuration.appStore.environment != .production, topic: configuration.pipeline.eventTopic,
            creditLimits: configuration.credits.limits, crashPoint: configuration.crashPoint,
            outboundEvents: configuration.pipeline.outboundEventsEnabled,
            finishTransactions: configuration.schedulers.finishTransactions)
        reader = EventReader(cipher: cipher, verifier: verifier)
        batches = FulfillmentBatches(
            leases: leases, store: store, owner: configuration.workerID, lease: configuration.lease, logger: logger)
        notifier = FulfillmentNotifier(leases: leases, logger: logger)
    }

    /// Kafka handler. Returns normally once the event's fate is recorded in PostgreSQL; throws only
    /// when PostgreSQL itself is unreachable, so the consumer redelivers the message later.
    public func handle(_ message: KafkaMessage) async throws {
        guard let envelope = EventEnvelope.decode(message.value) else {
            // Not ours to interpret; skipping loses nothing because PostgreSQL holds every event.
            metrics.outcome("invalid_message")
            logger.warning(
                "message is not an event envelope, skipped",
                ["kafka.partition": .int(Int64(message.partition)), "kafka.offset": .int(message.offset)])
            return
        }
        guard let event = try await batches.claims.submit(envelope) else {
            // Done, leased by a live worker, or waiting for its retry time: the sweeper brings it back if needed.
            metrics.outcome("skipped")
            return
        }
        guard let renewal else { return try await process(event) }
        try await renewal.holdingEvent(event.id) { try await process(event) }
    }

    /// Applies a claimed event and records its outcome.
    private func process(_ event: ClaimedEvent) async throws {
        configuration.crashPoint.reached(.claimed)
        let started = ContinuousClock.now
        var log = logger.with(["event.id": .int(event.id), "event.kind": .string(event.kind.rawValue)])
        if let trace = event.traceID { log = log.with(["trace.id": .string(trace)]) }
        do {
            var verified = try await reader.read(event)
            log = log.with(Self.metadata(verified))
            if let appTransactionLookup { verified = await appTransactionLookup.complete(verified, log: log) }
            if verified.source.action == .consumptionRequest, let consumption {
                try await consumption.answer(event, verified, now: clock.now())
            }
            if verified.source.action == .rescindConsent { try await rescindConsent(event, verified, log: log) }
            let outcome = try await batches.applies.submit(PendingEvent(event: event, verified: verified, now: clock.now())).get()
            metrics.duration.observe(since: started)
            switch outcome {
            case .leaseLost:
                metrics.outcome("skipped")
                log.info("lease lost before commit, left to its new owner")
            case .done(let plan, let granted):
                configuration.crashPoint.reached(.committed)
                notifier.notify(event)
                if !plan.events.isEmpty { outboundRelay?.nudge() }
                record(plan, granted: granted, source: verified.source, log: log, started: started)
            }
        } catch {
            try await record(Self.failure(for: error), for: event, log: log)
        }
    }

    /// RESCIND_CONSENT, acted on before the event completes (its own transaction, idempotent: a
    /// retry after a crash in between finds the users rescinded and adds nothing). A notification
    /// whose Apple Account bought nothing here, or names none, is recorded and counted: there is no
    /// one to act on, and a replay would find no one either.
    private func rescindConsent(_ event: ClaimedEvent, _ verified: VerifiedEvent, log: Logger) async throws {
        guard case .notification(let uuid, _, _) = event.payload.origin, let account = verified.appTransactionID else {
            metrics.consentRescinded("unmatched")
            return log.warning("RESCIND_CONSENT without a signed app transaction: no Apple Account to act on")
        }
        let users = try await UserStore(pool: leases.pool).rescindConsent(
            appTransactionID: account, environment: event.payload.environment, notificationUUID: uuid,
            signedAt: verified.signedDate, events: configuration.pipeline.outboundEventsEnabled, now: clock.now())
        metrics.consentRescinded(users.isEmpty ? "unmatched" : "rescinded")
        if users.isEmpty {
            log.warning("consent rescinded for an Apple Account with no purchase here, or rescinded already")
        } else {
            log.info("consent rescinded: entitlements off", ["users": .int(Int64(users.count))])
        }
    }

    /// How an attempt's error continues: retried, or set aside at once when the same fact would fail
    /// the same way.
    static func failure(for error: any Error) -> ProcessingFailure {
        switch error {
        case let failure as ProcessingFailure: failure
        // The same grant would pass the maximum again: set aside for an operator, replayable.
        case let error as CreditLimitExceeded: .permanent(code: CreditLimitExceeded.code, message: error.description)
        case let error as PostgresError where error.isRetryable: .retryable(code: "RETRYABLE_DATABASE", message: "\(error)")
        // A value beyond what a column holds (SQLSTATE class 22): the same fact fails the same way.
        case let error as PostgresError where error.isDataException: .permanent(code: "DATA_OUT_OF_RANGE", message: "\(error)")
        default: .retryable(code: "FULFILLMENT_FAILED", message: "\(error)")
        }
    }

    /// What logs and dashboards see of a committed event.
    private func record(
        _ plan: FulfillmentPlan, granted: Int, source: FactSource, log: Logger, started: ContinuousClock.Instant
    ) {
        var log = log.with(["latency.ms": .int(Int64((ContinuousClock.now - started) / .milliseconds(1)))])
        if let user = plan.user { log = log.with(["user.id": .string(user.userID)]) }
        if let order = plan.order { log = log.with(["order.no": .string(order.order.orderNo)]) }
        if let change = plan.subscription {
            log = log.with([
                "subscription.previous_status": .string(change.previousStatus?.rawValue ?? ""),
                "subscription.status": .string(change.state.status.rawValue),
            ])
        }
        if granted > 0 { metrics.grants.increment(by: granted) }
        if !plan.revocations.isEmpty { metrics.revocations.increment(by: plan.revocations.count) }
        if case .notification(let type, let subtype) = source, NotificationMatrix.alerts(type: type, subtype: subtype) {
            metrics.alert("\(type).\(subtype ?? "")")
            log.warning("notification needs an operator's attention")
        }
        switch plan.verdict {
        case .applied:
            metrics.outcome("succeeded")
            if let method = plan.attribution { metrics.attributed(method) }
            if plan.writesNothing {
                log.debug("event applied, nothing new", ["idempotency.result": .string("duplicate")])
            } else {
                log.info("event applied", ["credits.granted": .int(Int64(granted))])
            }
        case .recorded(let why):
            metrics.outcome("succeeded")
            if case .notification(let type, _) = source, source.action == .unknown {
                metrics.unknownType(type)
                log.warning("unknown notification type recorded, no business change")
            } else {
                log.debug("event recorded, no business change", ["reason": .string(why)])
            }
        case .unmatched(let reason):
            metrics.outcome("dead")
            metrics.unmatched(reason.rawValue)
            log.warning(
                "fact unmatched, kept for replay",
                ["error.code": .string(reason.rawValue), "error.reason": .string(plan.unattributedReason ?? "")])
        case .accountConflict:
            metrics.outcome("dead")
            metrics.accountConflicts.increment()
            log.error("account conflict: chain frozen", ["error.code": .string("ACCOUNT_CONFLICT")])
        case .refused(let code, let reason):
            metrics.outcome("dead")
            metrics.refused(code)
            log.warning("fact refused", ["error.code": .string(code), "error.reason": .string(reason)])
        }
    }

    static func metadata(_ verified: VerifiedEvent) -> Logger.Metadata {
        var metadata: Logger.Metadata = [:]
        if case .notification(let type, let subtype) = verified.source {
            metadata["appstore.notification_type"] = .string(type)
            if let subtype { metadata["appstore.subtype"] = .string(subtype) }
        }
        if let fact = verified.transaction?.fact {
            metadata["appstore.transaction_id"] = .string(fact.transactionID)
            metadata["appstore.original_transaction_id"] = .string(fact.originalTransactionID)
            metadata["appstore.product_id"] = .string(fact.productID)
            metadata["appstore.environment"] = .string(fact.environment)
        }
        return metadata
    }

    private func record(_ failure: ProcessingFailure, for event: ClaimedEvent, log: Logger) async throws {
        switch failure {
        case .leaseLost:
            metrics.outcome("skipped")
            log.info("lease lost, left to its new owner")
        case .retryable(let code, let message) where event.retryCount + 1 < configuration.maxAttempts:
            let delay = RetryPolicy.delay(
                attempt: event.retryCount + 1, base: configuration.retryBase, max: configuration.retryMax)
            try await leases.fail(event, owner: configuration.workerID, code: code, message: message, retryAt: delay)
            metrics.outcome("retry")
            log.warning("event will be retried", ["error.code": .string(code), "retry.attempt": .int(Int64(event.retryCount + 1))])
        case .retryable(let code, let message), .permanent(let code, let message):
            try await leases.fail(event, owner: configuration.workerID, code: code, message: message, retryAt: nil)
            notifier.notify(event)
            metrics.outcome("dead")
            metrics.refused(code)
            log.error("event is dead", ["error.code": .string(code)])
        }
    }
}

/// The worker's counters, created once (labels with Apple's values are created on first use).
private struct ProcessorMetrics: Sendable {
    let outcomes: [String: Counter] = Dictionary(
        uniqueKeysWithValues: ["succeeded", "retry", "dead", "skipped", "invalid_message"].map {
            (
                $0,
                MetricsRegistry.shared.counter(
                    "subs_fulfillment_events_total", help: "Events handled by outcome", labels: ["outcome": $0])
            )
        })
    let duration = MetricsRegistry.shared.histogram(
        "subs_fulfillment_processing_seconds", help: "Time from claim to commit of one event")
    let accountConflicts = MetricsRegistry.shared.counter(
        "subs_fulfillment_account_conflicts_total", help: "Facts attributed to one user but claimed by another (chains frozen)")
    let grants = MetricsRegistry.shared.counter("subs_credit_grants_total", help: "Credit grants written")
    let revocations = MetricsRegistry.shared.counter(
        "subs_credit_revocations_total", help: "Grants revoked by refunds and revocations")

    func outcome(_ name: String) { outcomes[name]?.increment() }

    func attributed(_ method: AttributionMethod) {
        MetricsRegistry.shared.counter(
            "subs_attributions_total", help: "Applied facts by how their user was found", labels: ["method": method.rawValue]
        ).increment()
    }

    func unmatched(_ reason: String) {
        MetricsRegistry.shared.counter(
            "subs_fulfillment_unmatched_total", help: "Facts kept unmatched (product or account), by reason",
            labels: ["reason": reason]
        ).increment()
    }

    func refused(_ code: String) {
        MetricsRegistry.shared.counter(
            "subs_fulfillment_dead_total", help: "Events buried, by error code", labels: ["code": code]
        ).increment()
    }

    func unknownType(_ type: String) {
        MetricsRegistry.shared.counter(
            "subs_fulfillment_unknown_notifications_total", help: "Notifications of a type this version does not know",
            labels: ["type": String(type.prefix(64))]
        ).increment()
    }

    func consentRescinded(_ outcome: String) {
        MetricsRegistry.shared.counter(
            "subs_consent_rescinded_total", help: "RESCIND_CONSENT notifications acted on, or naming no account of ours",
            labels: ["outcome": outcome]
        ).increment()
    }

    func alert(_ reason: String) {
        MetricsRegistry.shared.counter(
            "subs_fulfillment_alerts_total", help: "Notifications that need an operator", labels: ["reason": reason]
        ).increment()
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
        d.inSeconds
    }
}
