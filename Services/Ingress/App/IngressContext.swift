import AppStore
import AppleOperations
import Catalogue
import Credits
import Crypto
import HTTPServer
import Pipeline
import Postgres
import ServiceRuntime
import Storage
import Webhooks

/// What the application assembles once at start-up: the settings, the stores on the pools, the
/// verifiers and authenticators. The routers hand each route group the parts it calls; no route
/// group holds this or a pool.
struct IngressContext: Sendable {
    let configuration: IngressConfiguration
    let pool: PostgresPool
    /// Where the list endpoints read: the replica's pool (`DATABASE_READ_URL`), else `pool`. A
    /// replica lags a little, so nothing read right after a write (a balance, an order, the state
    /// an action left) comes from it.
    let readPool: PostgresPool
    /// The events: intake, the admin replays.
    let events: EventStore
    let intake: NotificationIntake
    let verifier: SignedDataVerifier
    /// StoreKit 1 app receipts of imports.
    let receiptVerifier: AppReceiptVerifier
    let cipher: PayloadCipher
    let authenticator: UserAuthenticator
    let services: ServiceAuthenticator
    /// Wakes submissions when their worker is done; the application runs it as a service.
    let waiter: FulfillmentWaiter
    let orders: OrderStore
    let users: UserStore
    let subscriptions: SubscriptionStore
    let credits: CreditStatementStore
    /// The credit statements (grants, daily bills), on `readPool`.
    let statements: CreditStatementStore
    let imports: ImportStore
    let consents: ConsentStore
    let catalogue: CatalogueStore
    let meter: CreditMeter
    let ledger: CreditLedger
    let cases: CaseStore
    /// The event queue's lists and counts, on `readPool`.
    let queue: CaseStore
    let chains: ChainBindingStore
    let tasks: TaskStore
    let consoleSessions: ConsoleSessionStore
    let entitlements: EntitlementStore
    let webhooks: WebhookStore
    let offerSignatures: OfferSignatureStore
    let retentionAnswers: RetentionMessageStore
    /// The App Store Server API, when its key is configured (`appStoreAPI`).
    let appleAPI: AppStoreServerAPIClient?
    let renewalExtensions: AppleRenewalExtensionStore
    /// The Apple endpoints' budgets per source.
    let notificationLimits: NotificationLimits
    /// What `/readyz` reports; the application runs it as a service.
    let readiness: ReadinessMonitor
    let clock: any WallClock
    let logger: Logger
    /// Refused requests, which any client can send at any rate: a warning per refusal reason at
    /// most every 10 s, each counting the refusals since the previous one.
    let refusals: ThrottledLog

    /// The ingress's dependencies on `pool` (and on `readPool`, when the lists have a replica of
    /// their own), handing what it commits to the outbox to `publisher`.
    init(
        configuration: IngressConfiguration, pool: PostgresPool, readPool: PostgresPool? = nil, publisher: any OutboxPublishing,
        readiness: ReadinessMonitor, clock: any WallClock, logger: Logger
    ) throws {
        self.configuration = configuration
        self.pool = pool
        self.readPool = readPool ?? pool
        self.readiness = readiness
        notificationLimits = NotificationLimits(configuration: configuration)
        self.clock = clock
        self.logger = logger
        refusals = ThrottledLog(logger: logger)
        events = EventStore(pool: pool, topic: configuration.pipeline.eventTopic)
        intake = NotificationIntake(store: events, publisher: publisher)
        verifier = try SignedDataVerifier(configuration: configuration.appStore, clock: clock, logger: logger)
        receiptVerifier = try AppReceiptVerifier(configuration: configuration.appStore, clock: clock, logger: logger)
        // `load` refuses a configuration without keys; a hand-made one must carry them.
        guard let cipher = configuration.payloadCipher else { preconditionFailure("PAYLOAD_ENCRYPTION_KEYS missing") }
        self.cipher = cipher
        authenticator = try UserAuthenticator(settings: configuration.userTokens, clock: clock, logger: logger)
        services = ServiceAuthenticator(settings: configuration.serviceTokens)
        waiter = FulfillmentWaiter(pool: pool, logger: logger)
        orders = OrderStore(pool: pool)
        users = UserStore(pool: pool)
        subscriptions = SubscriptionStore(pool: pool)
        credits = CreditStatementStore(pool: pool)
        statements = CreditStatementStore(pool: self.readPool)
        imports = ImportStore(pool: pool)
        consents = ConsentStore(pool: pool)
        catalogue = CatalogueStore(pool: pool)
        meter = CreditMeter(pool: pool)
        ledger = CreditLedger(pool: pool)
        cases = CaseStore(pool: pool)
        queue = CaseStore(pool: self.readPool)
        chains = ChainBindingStore(pool: pool, topic: configuration.pipeline.eventTopic)
        tasks = TaskStore(pool: pool)
        consoleSessions = ConsoleSessionStore(pool: pool)
        entitlements = EntitlementStore(pool: pool)
        webhooks = WebhookStore(pool: pool)
        offerSignatures = OfferSignatureStore(pool: pool)
        retentionAnswers = RetentionMessageStore(pool: pool)
        appleAPI = configuration.appStoreAPI.map { AppStoreServerAPIClient(configuration: $0, clock: clock, logger: logger) }
        renewalExtensions = AppleRenewalExtensionStore(pool: pool)
    }

    /// The offer signature route: the catalogue's rules, the user's chains, the audit, the App
    /// Store key when configured, and the per-user budget (one limiter per router built).
    var offerRoutes: OfferRoutes {
        OfferRoutes(
            catalogue: catalogue, subscriptions: subscriptions, signatures: offerSignatures,
            signer: configuration.appStoreAPI.map(StoreKitRequestSigner.init), ratePerMinute: configuration.offerSignatureRatePerMinute,
            burst: configuration.offerSignatureRateBurst, appKey: configuration.appStore.bundleId, clock: clock)
    }

    /// Apple's Get Retention Message endpoint: the catalogue's retention rules, the subscriber's
    /// chains and consent, the record of answers, and the App Store key for offers.
    var retentionRoutes: RetentionRoutes {
        RetentionRoutes(
            enabled: configuration.retentionMessagingEnabled, verifier: verifier, catalogue: catalogue, subscriptions: subscriptions,
            answers: retentionAnswers, signer: configuration.appStoreAPI.map(StoreKitRequestSigner.init), limits: notificationLimits,
            appKey: configuration.appStore.bundleId, clock: clock)
    }

    /// The admin API's Apple actions (mass renewal-date extension).
    var appleAdminRoutes: AppleAdminRoutes {
        AppleAdminRoutes(extensions: appleAPI.map { MassRenewalExtension(client: $0, store: renewalExtensions, clock: clock) })
    }

    /// The webhook routes' registration (store, cipher, rules) and cursors.
    var webhookRoutes: WebhookRoutes {
        WebhookRoutes(
            registration: WebhookRegistration(store: webhooks, cipher: cipher, configuration: configuration.webhooks),
            cursors: PageCursorSigner(key: configuration.cursorSigningKey))
    }

    /// The metering routes' store and clock.
    var creditsRoutes: CreditsRoutes { CreditsRoutes(credits: meter, clock: clock) }

    /// The entitlement reads, signed with `ENTITLEMENT_SIGNING_KEY_PATH`'s key when it is set.
    var entitlementRoutes: EntitlementRoutes {
        EntitlementRoutes(
            entitlements: entitlements, signer: configuration.entitlementSigningKey.map(EntitlementSigner.init), clock: clock)
    }

    /// The admin API's entitlement reads and promotional grants.
    var entitlementAdminRoutes: EntitlementAdminRoutes {
        EntitlementAdminRoutes(entitlements: entitlements, environment: configuration.appStore.environment.rawValue, clock: clock)
    }

    /// The upload routes, which the import routes also verify signed transactions with.
    var submissionRoutes: SubmissionRoutes {
        SubmissionRoutes(
            events: events, intake: intake, orders: orders, users: users, subscriptions: subscriptions, verifier: verifier,
            cipher: cipher, waiter: waiter, environment: configuration.appStore.environment,
            fulfillmentWait: configuration.fulfillmentWait, refusals: refusals, clock: clock, logger: logger)
    }
}

/// What the ingress's middleware established for one request.
struct IngressRequestContext: RequestContext {
    let traceID: String
    var logger: Logger
    /// Set by `UserAuthentication` on the user routes.
    var user: AuthenticatedUser?
    /// Set by `ServiceAuthentication` on the service routes (metering, entitlement reads).
    var service: AuthenticatedService?

    init(traceID: String, logger: Logger) {
        self.traceID = traceID
        self.logger = logger
    }

    /// The authenticated user; a route outside the user group has none (401, as for no token).
    func requireUser() throws(HTTPError) -> AuthenticatedUser {
        guard let user else { throw APIError.unauthorized() }
        return user
    }

    /// The authenticated service; a route outside the service groups has none.
    func requireService() throws(HTTPError) -> AuthenticatedService {
        guard let service else { throw APIError.unauthorized("a service bearer token is required") }
        return service
    }
}
