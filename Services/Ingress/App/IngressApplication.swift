import AppStore
import Foundation
import HTTPServer
import Kafka
import Pipeline
import Postgres
import ServiceRuntime
import Storage

/// The ingress process: its services in start order, serving the routes of `buildRouter`.
public struct IngressApplication: Sendable {
    public let configuration: IngressConfiguration
    public let pool: PostgresPool
    /// The replica's pool of the list endpoints, when `DATABASE_READ_URL` is set.
    public let readPool: PostgresPool?
    public let producer: KafkaProducer
    public let intake: NotificationIntake
    public let sweeper: PipelineSweeper
    public let server: HTTPServer
    /// Probes and metrics, on `INTERNAL_HTTP_HOST`:`INTERNAL_HTTP_PORT`.
    public let internalServer: HTTPServer
    /// The admin API's own listener, when `ADMIN_TOKENS` is set.
    public let adminServer: HTTPServer?
    public let logger: Logger
    let readiness: ReadinessMonitor
    let waiter: FulfillmentWaiter
    /// Method and path pattern of every route served, for the check that the API document lists them all.
    public let routes: [(method: String, pattern: String)]

    public init(configuration: IngressConfiguration, logger: Logger, clock: any WallClock = SystemClock()) throws {
        self.configuration = configuration
        self.logger = logger
        pool = PostgresPool(configuration: configuration.pipeline.postgres, logger: logger)
        readPool = configuration.readPostgres.map { PostgresPool(configuration: $0, logger: logger) }
        producer = try KafkaProducer(
            configuration: configuration.pipeline.kafka, logger: logger,
            shutdownTimeout: configuration.pipeline.producerFlushTimeout)
        let store = EventStore(pool: pool, topic: configuration.pipeline.eventTopic)
        let publisher = EventPublisher(producer: producer, outbox: store, logger: logger)
        sweeper = PipelineSweeper(
            publisher: publisher, interval: configuration.pipeline.sweepInterval,
            stuckAfter: configuration.pipeline.stuckAfter, logger: logger,
            ensureTopic: Bootstrap.topicEnsurer(configuration: configuration.pipeline, logger: logger), topicReady: false)
        readiness = ReadinessMonitor(
            pool: pool, producer: producer, topic: configuration.pipeline.eventTopic, schema: SchemaGate())
        let context = try IngressContext(
            configuration: configuration, pool: pool, readPool: readPool, publisher: publisher, readiness: readiness, clock: clock,
            logger: logger)
        intake = context.intake
        waiter = context.waiter
        let router = try buildRouter(context)
        routes = router.registeredRoutes
        server = HTTPServer(
            configuration: HTTPServerConfiguration(
                host: configuration.httpHost, port: configuration.httpPort,
                threadPoolSize: configuration.httpThreads, maxBodyBytes: configuration.maxBodyBytes,
                trustedProxies: configuration.trustedProxies, maxConnectionsPerAddress: configuration.maxConnectionsPerIP,
                requestHeaderTimeout: configuration.requestHeaderTimeout),
            router: router, logger: logger, admission: NotificationAdmission().check)
        internalServer = HTTPServer(
            configuration: HTTPServerConfiguration(
                host: configuration.internalHTTPHost, port: configuration.internalHTTPPort, threadPoolSize: 1),
            router: HealthRoutes(readiness: readiness).internalRouter(), logger: logger)
        adminServer =
            configuration.admin.isEnabled
            ? HTTPServer(
                configuration: HTTPServerConfiguration(
                    host: configuration.admin.host, port: configuration.admin.port, threadPoolSize: 1,
                    maxBodyBytes: 64 * 1024, connectionLimit: 64),
                router: try buildAdminRouter(context), logger: logger) : nil
    }

    /// Dependencies first: the group stops them in reverse order (HTTP, then sweeper, producer, pool).
    public var services: [any Service] {
        [pool] + (readPool.map { [$0] } ?? []) + [producer, readiness, sweeper, waiter, internalServer, server]
            + (adminServer.map { [$0] } ?? [])
    }

    /// Opens the probes' listener, waits for the schema (or migrates, `MIGRATE_ON_START`), creates
    /// the topic (or leaves it to the sweeper when the broker does not answer within a few
    /// seconds), then serves until SIGTERM/SIGINT, stopping within the grace.
    public func run() async throws {
        // Probes first: /healthz answers and /readyz says what the schema waits for while the
        // set-up Job migrates, so a long migration does not fail the start-up probe.
        try internalServer.start()
        logger.info("probes listening", ["internal.http.port": .int(Int64(internalServer.port))])
        try await Bootstrap.prepare(
            configuration: configuration.pipeline, pool: pool, logger: logger, topicWait: .seconds(5), schema: readiness.schema)
        // Observed once before listening, so the first /readyz already has an answer.
        await readiness.observe()
        try server.start()
        logger.info(
            "ingress listening",
            ["http.port": .int(Int64(server.port)), "internal.http.port": .int(Int64(internalServer.port))])
        if let adminServer {
            try adminServer.start()
            logger.info("admin API listening", ["admin.port": .int(Int64(adminServer.port))])
        }
        try await ServiceGroup(services: services, logger: logger, gracefulTimeout: configuration.pipeline.shutdownGrace).run()
    }
}
