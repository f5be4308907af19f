import AppStore
import Foundation
import ServiceRuntime
import Storage

/// What the worker does besides applying events, and how it reaches Apple for it.
public struct SchedulerConfiguration: Sendable {
    /// The App Store Server API (`APPLE_IAP_ISSUER_ID`, `APPLE_IAP_KEY_ID`,
    /// `APPLE_IAP_PRIVATE_KEY_PATH`, with `APPLE_IAP_BUNDLE_ID`, `APPLE_IAP_ENV` and the
    /// `APPLE_IAP_API_BASE_URL_*` overrides). Nil when none of the three key settings is given:
    /// then consumption requests are recorded unanswered and re-queries and recoveries wait.
    public var appStoreAPI: AppStoreServerAPIConfiguration?
    /// Period of the scheduler's passes (`FULFILLMENT_SCHEDULER_INTERVAL_MS`). Default 1000.
    public var interval: Duration
    /// Notification history recovered at start-up (`FULFILLMENT_RECOVERY_WINDOW_HOURS`, 0 disables). Default 6.
    public var recoveryWindow: Duration
    /// Open purchase orders older than this are EXPIRED (`FULFILLMENT_ORDER_EXPIRY_MINUTES`, 0
    /// disables). Default 1440: Ask to Buy requests lapse after a day.
    public var orderExpiry: Duration?
    /// How often chains whose facts disagree are looked for (`FULFILLMENT_REQUERY_SCAN_SECONDS`, 0
    /// disables). Default 60.
    public var requeryScan: Duration?
    /// A chain re-queried this recently is not flagged again (Apple's own answer may disagree the
    /// same way; only an operator then asks again). `FULFILLMENT_REQUERY_COOLDOWN_MINUTES`, default 60.
    public var requeryCooldown: Duration
    /// Attempts of a re-query or recovery before it is FAILED (`FULFILLMENT_TASK_MAX_ATTEMPTS`). Default 8.
    public var taskMaxAttempts: Int
    /// How often Apple's notification history is asked for the deliveries it failed
    /// (`FULFILLMENT_FAILED_DELIVERY_INTERVAL_SECONDS`, 0 disables). Default 3600.
    public var failedDeliveryInterval: Duration?
    /// How far back each of those asks (`FULFILLMENT_FAILED_DELIVERY_WINDOW_HOURS`). Default 24.
    public var failedDeliveryWindow: Duration
    /// How often chains that lapsed without a word from Apple are re-queried
    /// (`FULFILLMENT_EXPIRY_REQUERY_INTERVAL_SECONDS`, 0 disables). Default 86400.
    public var expiryRequeryInterval: Duration?
    /// How long after its expiry a chain with auto-renew on and no renewal, expiry or billing-retry
    /// fact counts as lapsed (`FULFILLMENT_EXPIRY_REQUERY_AFTER_MINUTES`). Default 60.
    public var expiryRequeryAfter: Duration
    /// The most re-query calls to Apple per second of this worker, per environment
    /// (`FULFILLMENT_REQUERY_RATE_PRODUCTION`, default 20; `FULFILLMENT_REQUERY_RATE_SANDBOX`,
    /// default 5): the sum over the workers must stay within Apple's limits (at most 50 a second
    /// in Production, less in Sandbox).
    public var requeryRates: [String: Int]
    /// Period of the clock job, which advances subscriptions whose status changes by the clock
    /// (expiry, grace end, billing retry's end) within seconds of the moment
    /// (`SUBSCRIPTION_CLOCK_INTERVAL_MS`, 0 disables in this process). Default 1000.
    public var clockInterval: Duration?
    /// Rows per clock job transaction (`SUBSCRIPTION_CLOCK_BATCH_SIZE`, 1–1000). Default 500: each
    /// row holds its chain's advisory lock until commit, and PostgreSQL's lock table is shared
    /// (2 runners × 2,000 rows ran out of it with the default `max_locks_per_transaction`).
    public var clockBatchSize: Int
    /// Whether each transaction the worker delivers is reported to Apple with Finish Transaction
    /// (`APPLE_FINISH_TRANSACTIONS`, default false): for apps whose server, not StoreKit's
    /// `Transaction.finish()`, completes delivery. Needs the App Store Server API key.
    public var finishTransactions: Bool
    /// Days a finished Finish Transaction task is kept before it is deleted
    /// (`APPLE_FINISH_TRANSACTIONS_KEEP_DAYS`, 1–3650). Default 30.
    public var finishedTransactionsKeepDays: Int

    public init(reader: ConfigurationReader) {
        let keySettings = ["APPLE_IAP_ISSUER_ID", "APPLE_IAP_KEY_ID", "APPLE_IAP_PRIVATE_KEY_PATH"]
        appStoreAPI = keySettings.contains { reader.raw($0) != nil } ? AppStoreServerAPIConfiguration.read(from: reader) : nil
        interval = .milliseconds(reader.int("FULFILLMENT_SCHEDULER_INTERVAL_MS", default: 1000, range: 10...600_000))
        recoveryWindow = .seconds(3600 * reader.int("FULFILLMENT_RECOVERY_WINDOW_HOURS", default: 6, range: 0...(24 * 180)))
        let expiry = reader.int("FULFILLMENT_ORDER_EXPIRY_MINUTES", default: 1440, range: 0...(60 * 24 * 365))
        orderExpiry = expiry == 0 ? nil : .seconds(60 * expiry)
        let scan = reader.int("FULFILLMENT_REQUERY_SCAN_SECONDS", default: 60, range: 0...86_400)
        requeryScan = scan == 0 ? nil : .seconds(scan)
        requeryCooldown = .seconds(60 * reader.int("FULFILLMENT_REQUERY_COOLDOWN_MINUTES", default: 60, range: 0...(60 * 24 * 30)))
        taskMaxAttempts = reader.int("FULFILLMENT_TASK_MAX_ATTEMPTS", default: 8, range: 1...1000)
        let failed = reader.int("FULFILLMENT_FAILED_DELIVERY_INTERVAL_SECONDS", default: 3600, range: 0...604_800)
        failedDeliveryInterval = failed == 0 ? nil : .seconds(failed)
        // Apple keeps notification history for 180 days.
        failedDeliveryWindow = .seconds(3600 * reader.int("FULFILLMENT_FAILED_DELIVERY_WINDOW_HOURS", default: 24, range: 1...(24 * 180)))
        let lapsed = reader.int("FULFILLMENT_EXPIRY_REQUERY_INTERVAL_SECONDS", default: 86_400, range: 0...(86_400 * 30))
        expiryRequeryInterval = lapsed == 0 ? nil : .seconds(lapsed)
        expiryRequeryAfter = .seconds(60 * reader.int("FULFILLMENT_EXPIRY_REQUERY_AFTER_MINUTES", default: 60, range: 0...(60 * 24 * 30)))
        requeryRates = [
            "Production": reader.int("FULFILLMENT_REQUERY_RATE_PRODUCTION", default: 20, range: 1...50),
            "Sandbox": reader.int("FULFILLMENT_REQUERY_RATE_SANDBOX", default: 5, range: 1...50),
        ]
        let clock = reader.int("SUBSCRIPTION_CLOCK_INTERVAL_MS", default: 1000, range: 0...60_000)
        clockInterval = clock == 0 ? nil : .milliseconds(clock)
        clockBatchSize = reader.int("SUBSCRIPTION_CLOCK_BATCH_SIZE", default: 500, range: 1...1000)
        finishTransactions = reader.bool("APPLE_FINISH_TRANSACTIONS", default: false)
        finishedTransactionsKeepDays = reader.int("APPLE_FINISH_TRANSACTIONS_KEEP_DAYS", default: 30, range: 1...3650)
        if finishTransactions, appStoreAPI == nil {
            // Refused rather than queued: tasks nobody can run would pile up unseen.
            reader.report(
                "APPLE_FINISH_TRANSACTIONS", "true",
                "false, or the App Store Server API key (APPLE_IAP_ISSUER_ID, APPLE_IAP_KEY_ID, APPLE_IAP_PRIVATE_KEY_PATH) to call Finish Transaction with"
            )
        }
    }
}

/// One App Store Server API client per environment the deployment serves: a Production
/// deployment also answers for its Sandbox facts (TestFlight, reviewers), with the same key.
///
/// Sendable: immutable references to Sendable clients.
struct AppStoreAPIClients: Sendable {
    private let production: AppStoreServerAPIClient?
    private let sandbox: AppStoreServerAPIClient

    /// The API's own timeouts bound every call: the event or task a call works for keeps its
    /// lease through it (`LeaseRenewal`), however short the lease.
    init(configuration: AppStoreServerAPIConfiguration, logger: Logger) {
        var sandboxConfiguration = configuration
        sandboxConfiguration.environment = .sandbox
        sandbox = AppStoreServerAPIClient(configuration: sandboxConfiguration, logger: logger)
        production =
            configuration.environment == .production
            ? AppStoreServerAPIClient(configuration: configuration, logger: logger) : nil
    }

    /// The client for a task's environment; a task of an environment this deployment does not
    /// serve fails for good (no later attempt would find a client).
    func client(serving task: ClaimedTask) throws(ProcessingFailure) -> AppStoreServerAPIClient {
        guard let client = client(for: task.environment) else {
            throw .permanent(code: "ENVIRONMENT_NOT_SERVED", message: "this deployment does not serve \(task.environment)")
        }
        return client
    }

    /// The client for facts of `environment` (Apple's spelling), nil when this deployment does not serve it.
    func client(for environment: String) -> AppStoreServerAPIClient? {
        switch environment {
        case AppStoreEnvironment.production.rawValue: production
        case AppStoreEnvironment.sandbox.rawValue: sandbox
        default: nil
        }
    }
}
