import AppStore
import Crypto
import Foundation
import Pipeline
import Postgres
import ServiceRuntime
import Storage

/// The worker's periodic work beside the event stream, safe with any number of workers: stale
/// orders expired (SKIP LOCKED), chains whose facts disagree flagged for a re-query, and the
/// re-queries and notification-history recoveries (start-up window, operators' requests) run
/// under leases from `fulfillment_task`.
final class Scheduler: Service {
    let name = "fulfillment-scheduler"
    private let configuration: SchedulerConfiguration
    private let tasks: TaskStore
    /// This worker's id: the owner of its task leases.
    private let owner: String
    private let lease: Duration
    /// Extends the lease of the running task between its checkpoints.
    private let renewal: LeaseRenewal
    /// What needs the App Store Server API.
    private typealias AppleWork = (
        requery: ChainRequery, recovery: NotificationRecovery, tokens: AppAccountTokenSetter, imports: SubscriptionImporter,
        finisher: TransactionFinisher
    )
    /// Nil when the App Store Server API is not configured.
    private let apple: AppleWork?
    private let environments: [String]
    private let pool: PostgresPool
    private let logger: Logger
    private let stop = ShutdownTrigger()
    private let expired = MetricsRegistry.shared.counter("subs_orders_expired_total", help: "Stale open orders EXPIRED")
    private let flagged = MetricsRegistry.shared.counter(
        "subs_requery_flagged_total", help: "Chains whose facts disagree, flagged for a re-query from Apple")
    private let lapsed = MetricsRegistry.shared.counter(
        "subs_requery_lapsed_total", help: "Chains past their expiry with no word from Apple, flagged for a re-query")

    init(
        configuration: FulfillmentConfiguration, events: EventStore, publisher: EventPublisher, verifier: SignedDataVerifier,
        cipher: PayloadCipher, clients: AppStoreAPIClients?, renewal: LeaseRenewal, logger: Logger
    ) {
        self.renewal = renewal
        self.configuration = configuration.schedulers
        pool = events.pool
        self.logger = logger
        tasks = TaskStore(pool: events.pool)
        owner = configuration.workerID
        lease = configuration.lease
        apple = clients.map { clients in
            (
                ChainRequery(
                    events: events, publisher: publisher, cipher: cipher, clients: clients,
                    bundleID: configuration.appStore.bundleId,
                    pacer: RequestPacer(rates: configuration.schedulers.requeryRates), logger: logger),
                NotificationRecovery(
                    events: events, publisher: publisher, cipher: cipher, verifier: verifier, clients: clients, logger: logger),
                AppAccountTokenSetter(
                    bindings: ChainBindingStore(pool: events.pool, topic: configuration.pipeline.eventTopic), clients: clients,
                    logger: logger),
                SubscriptionImporter(
                    imports: ImportStore(pool: events.pool),
                    bindings: ChainBindingStore(pool: events.pool, topic: configuration.pipeline.eventTopic), events: events,
                    publisher: publisher, cipher: cipher, verifier: verifier, clients: clients,
                    bundleID: configuration.appStore.bundleId, logger: logger),
                TransactionFinisher(tasks: TaskStore(pool: events.pool), clients: clients, owner: configuration.workerID, logger: logger)
            )
        }
        let served = configuration.schedulers.appStoreAPI?.environment
        environments = served == .production ? ["Production", "Sandbox"] : served.map { [$0.rawValue] } ?? []
    }

    func run() async throws {
        if apple == nil {
            logger.warning(
                "App Store Server API not configured (APPLE_IAP_ISSUER_ID, APPLE_IAP_KEY_ID, APPLE_IAP_PRIVATE_KEY_PATH): consumption requests stay unanswered, re-queries and recoveries wait"
            )
        } else {
            await requestStartupRecovery()
        }
        var nextScan = ContinuousClock.now
        var nextFailedDeliveries = ContinuousClock.now
        var nextLapsedScan = ContinuousClock.now
        var nextFinishedPurge = ContinuousClock.now
        while !stop.isFired {
            if let age = configuration.orderExpiry { await expireOrders(olderThan: age) }
            if let apple {
                if let scan = configuration.requeryScan, ContinuousClock.now >= nextScan {
                    await flagDisagreeingChains(window: scan + .seconds(60))
                    nextScan = ContinuousClock.now + scan
                }
                // Every worker asks often; the database keeps it to one pull per interval.
                if let interval = configuration.failedDeliveryInterval, ContinuousClock.now >= nextFailedDeliveries {
                    await requestFailedDeliveries(every: interval)
                    nextFailedDeliveries = ContinuousClock.now + min(interval, .seconds(60))
                }
                if let interval = configuration.expiryRequeryInterval, ContinuousClock.now >= nextLapsedScan {
                    // Apple's answer takes a moment to apply: never ask again sooner than any re-query.
                    await flagLapsedChains(cooldown: max(interval, configuration.requeryCooldown))
                    nextLapsedScan = ContinuousClock.now + interval
                }
                if ContinuousClock.now >= nextFinishedPurge {
                    await deleteFinishedTransactions()
                    nextFinishedPurge = ContinuousClock.now + .seconds(3600)
                }
                await runDueTasks(apple)
            }
            _ = await stop.wait(timeout: configuration.interval)
        }
    }

    func shutdown() async { stop.fire() }

    /// Every worker asks; the pending key keeps it to one recovery per environment at a time.
    private func requestStartupRecovery() async {
        guard configuration.recoveryWindow > .zero, let environment = configuration.appStoreAPI?.environment.rawValue else { return }
        let end = Date()
        do {
            try await tasks.requestRecovery(
                environment: environment, start: end - configuration.recoveryWindow.inSeconds, end: end,
                reason: "start-up window", requestedBy: owner, dedupKey: "RECOVERY/STARTUP/\(environment)")
        } catch {
            logger.warning("start-up recovery not requested", ["error": .string("\(error)")])
        }
    }

    private func expireOrders(olderThan age: Duration) async {
        do {
            let count = try await StaleOrderExpiry.expire(pool: pool, olderThan: age)
            if count > 0 {
                expired.increment(by: count)
                logger.info("stale orders expired", ["orders.expired": .int(Int64(count))])
            }
        } catch {
            logger.warning("stale order expiry failed", ["error": .string("\(error)")])
        }
    }

    private func flagDisagreeingChains(window: Duration) async {
        do {
            let chains = try await tasks.requestRequeriesOfDisagreeingChains(
                environments: environments, window: window, cooldown: configuration.requeryCooldown, requestedBy: owner)
            flagged.increment(by: chains.count)
            for chain in chains { logger.warning("chain facts disagree, re-query requested", ["appstore.chain": .string(chain)]) }
        } catch {
            logger.warning("disagreeing chains not scanned", ["error": .string("\(error)")])
        }
    }

    /// Asks for the deliveries Apple failed in the deployment's environment (the webhook's own).
    private func requestFailedDeliveries(every interval: Duration) async {
        guard let environment = configuration.appStoreAPI?.environment.rawValue else { return }
        do {
            if let id = try await tasks.requestFailedDeliveryRecovery(
                environment: environment, window: configuration.failedDeliveryWindow, interval: interval, requestedBy: owner)
            {
                logger.info("failed deliveries requested from Apple's notification history", ["task.id": .int(id)])
            }
        } catch {
            logger.warning("failed deliveries not requested", ["error": .string("\(error)")])
        }
    }

    private func flagLapsedChains(cooldown: Duration) async {
        do {
            let chains = try await tasks.requestRequeriesOfLapsedChains(
                environments: environments, after: configuration.expiryRequeryAfter, cooldown: cooldown, requestedBy: owner)
            lapsed.increment(by: chains.count)
            for chain in chains { logger.warning("chain lapsed without a word from Apple, re-query requested", ["appstore.chain": .string(chain)]) }
        } catch {
            logger.warning("lapsed chains not scanned", ["error": .string("\(error)")])
        }
    }

    /// In batches, until a batch is not full; two workers at once delete different rows or none.
    private func deleteFinishedTransactions() async {
        do {
            var deleted = 0
            var batch = 0
            let limit = 10_000
            repeat {
                batch = try await tasks.deleteFinishedTransactions(
                    olderThanDays: configuration.finishedTransactionsKeepDays, limit: limit)
                deleted += batch
            } while batch == limit && !stop.isFired
            if deleted > 0 { logger.info("finished Finish Transaction tasks deleted", ["tasks.deleted": .int(Int64(deleted))]) }
        } catch {
            logger.warning("finished Finish Transaction tasks not deleted", ["error": .string("\(error)")])
        }
    }

    /// Runs due tasks until none is left or the worker stops.
    private func runDueTasks(_ apple: AppleWork) async {
        while !stop.isFired {
            let task: ClaimedTask?
            do { task = try await tasks.claim(owner: owner, lease: lease) } catch {
                logger.warning("tasks not claimed", ["error": .string("\(error)")])
                return
            }
            guard let task else { return }
            await renewal.holdingTask(task.id) { await execute(task, apple) }
        }
    }

    private func execute(_ task: ClaimedTask, _ apple: AppleWork) async {
        let log = logger.with(["task.id": .int(task.id), "appstore.environment": .string(task.environment)])
        do {
            let result: TaskResult
            switch task.work {
            case .requery(let original):
                result = try await apple.requery.run(task, originalTransactionID: original)
            case .setAppAccountToken(let original):
                result = try await apple.tokens.run(task, originalTransactionID: original)
            case .importHistory(let importID):
                result = try await apple.imports.run(task, importID: importID)
            case .finishTransaction(let transactionID):
                result = try await apple.finisher.run(task, transactionID: transactionID)
            case .recovery(let start, let end, let token, let onlyFailures):
                result = try await apple.recovery.run(task, start: start, end: end, onlyFailures: onlyFailures, from: token) {
                    next, progress in
                    try await self.tasks.checkpoint(
                        task, owner: self.owner, lease: self.lease, paginationToken: next, result: progress)
                }
            }
            try await tasks.complete(task, owner: owner, result: result)
            outcome("done")
        } catch let failure as ProcessingFailure {
            await record(failure, for: task, apple, log: log)
        } catch {
            await record(.retryable(code: "RETRYABLE_DATABASE", message: "\(error)"), for: task, apple, log: log)
        }
    }

    private func record(_ failure: ProcessingFailure, for task: ClaimedTask, _ apple: AppleWork, log: Logger) async {
        var code = ""
        var message = ""
        var delay: Duration?
        switch failure {
        case .leaseLost:
            log.info("task lease lost, left to its new owner")
            return
        case .retryable(let c, let m) where task.attempts < configuration.taskMaxAttempts:
            (code, message) = (c, m)
            delay = RetryPolicy.delay(attempt: task.attempts, base: .seconds(1), max: .seconds(300))
        case .retryable(let c, let m), .permanent(let c, let m):
            (code, message) = (c, m)
        }
        do {
            try await tasks.fail(task, owner: owner, code: code, message: message, retryAt: delay)
        } catch {
            log.warning("task outcome not recorded; its lease runs out", ["error": .string("\(error)")])
        }
        if case .finishTransaction = task.work {
            await apple.finisher.recorded(task, code: code, message: message, givenUp: delay == nil)
        }
        outcome(delay == nil ? "failed" : "retry")
        log.warning(delay == nil ? "task failed" : "task will be retried", ["error.code": .string(code)])
    }

    private func outcome(_ name: String) {
        MetricsRegistry.shared.counter(
            "subs_fulfillment_tasks_total", help: "Re-queries and recoveries by outcome", labels: ["outcome": name]
        ).increment()
    }

    /// The class of an App Store Server API failure.
    static func failure(_ error: AppStoreAPIError) -> ProcessingFailure {
        error.isRetryable
            ? .retryable(code: "RETRYABLE_NETWORK", message: error.description)
            : .permanent(code: "APPSTORE_API_\(error.rawAPIError.map(String.init) ?? error.kind.rawValue)", message: error.description)
    }
}
