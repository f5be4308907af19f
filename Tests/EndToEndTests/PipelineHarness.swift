import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import IngressApp
import Kafka
import Pipeline
import Postgres
import ServiceRuntime
import Storage
import TestSupport
import Testing

/// A private slice of the real services for one end-to-end test: its own database, topic and
/// consumer group, so tests never see each other's events.
struct PipelineHarness {
    let databaseURL: String
    let brokers: String
    let topic: String
    let groupID: String
    let partitions: Int
    /// Apple, simulated: every process of the slice trusts this signer's root.
    let signer: TestAppleSigner
    /// `APPLE_IAP_*` and `PAYLOAD_ENCRYPTION_KEYS`, the same for every process of the slice (the
    /// workers open what the ingress sealed).
    let appleSettings: [String: String]
    let logger = Logger(label: "e2e", level: .warning)

    /// - Parameters:
    ///   - server: the PostgreSQL server the slice's database is created on (default: the local
    ///     services'; a private one for tests that stop it).
    ///   - brokers: the Kafka brokers of the slice (default: the local services').
    ///   - existingDatabase: a database on that server to use as it is (the scale run's), instead
    ///     of a new one.
    ///   - migrations: the schema to migrate to (default: every bundled migration).
    static func make(
        partitions: Int = 6, appleEnvironment: AppStoreEnvironment = .sandbox, server: String? = nil, brokers: String? = nil,
        existingDatabase: String? = nil, migrations: [Migration]? = nil
    ) async throws -> PipelineHarness {
        let baseURL = try server ?? TestEnvironment.databaseURL()
        let brokers = try brokers ?? TestEnvironment.kafkaBrokers()
        let database = existingDatabase ?? TestEnvironment.uniqueName("e2e")
        if existingDatabase == nil {
            let admin = PostgresPool(
                configuration: TestEnvironment.poolConfiguration(url: baseURL, maximumConnections: 1), logger: Logger(label: "e2e"))
            // The name is generated above, never input: safe to splice into DDL.
            try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(database)"))
            await admin.shutdown()
        }
        // As a deployment does: the schema is migrated in one place before any service starts
        // (the services wait for it; MIGRATE_ON_START is for a lone machine).
        let pool = PostgresPool(
            configuration: TestEnvironment.poolConfiguration(url: Self.replacingDatabase(in: baseURL, with: database), maximumConnections: 1),
            logger: Logger(label: "e2e", level: .warning))
        try await withResource({ pool }, cleanUp: { await $0.shutdown() }) {
            try await Migrator(pool: $0, logger: Logger(label: "e2e", level: .warning)).migrate(migrations ?? Migrator.bundled())
        }
        let signer = try TestAppleSigner()
        var appleSettings = try signer.verifierEnvironment(
            bundleId: IngressHarness.bundleID, environment: appleEnvironment,
            appAppleId: appleEnvironment == .production ? 1_234_567_890 : nil)
        appleSettings["PAYLOAD_ENCRYPTION_KEYS"] = "k1:" + Data(SecureRandom.bytes(32)).base64EncodedString()
        return PipelineHarness(
            databaseURL: Self.replacingDatabase(in: baseURL, with: database), brokers: brokers, topic: TestEnvironment.uniqueName("events"),
            groupID: TestEnvironment.uniqueName("group"), partitions: partitions, signer: signer,
            appleSettings: appleSettings)
    }

    static func replacingDatabase(in url: String, with database: String) -> String {
        var components = URLComponents(string: url)!
        components.path = "/" + database
        return components.string!
    }

    /// Environment of a service process attached to this slice.
    var serviceEnvironment: [String: String] {
        [
            "DATABASE_URL": databaseURL,
            "KAFKA_BROKERS": brokers,
            "EVENT_TOPIC": topic,
            "EVENT_TOPIC_PARTITIONS": String(partitions),
            // The slice's own outbound topic: the shared broker's default one would mix the suites' events.
            "OUTBOUND_EVENT_TOPIC": topic + ".outbound",
            "FULFILLMENT_GROUP_ID": groupID,
            // Webhook delivery is tested on its own (WebhookDeliveryTests); in the other slices its
            // second consumer group and senders per worker only load a machine running every suite.
            // Where a slice turns it on, the group is the slice's own: one shared by every suite's
            // workers rebalanced at each worker's start and stop.
            "WEBHOOK_DELIVERY_ENABLED": "false",
            "WEBHOOK_CONSUMER_GROUP": groupID + ".webhooks",
            "FULFILLMENT_LEASE_SECONDS": "3",
            "EVENT_SWEEP_INTERVAL_MS": "500",
            "EVENT_STUCK_AFTER_SECONDS": "5",
            "KAFKA_PROPERTY_SESSION_TIMEOUT_MS": "2000",
            "KAFKA_PROPERTY_HEARTBEAT_INTERVAL_MS": "500",
            "LOG_LEVEL": "info",
            // Several workers share this host: each takes a free port for its /metrics.
            "FULFILLMENT_HTTP_PORT": "0",
        ].merging(appleSettings) { _, apple in apple }
    }

    var configuration: PipelineConfiguration {
        get throws {
            let reader = ConfigurationReader(
                environment: ProcessInfo.processInfo.environment.merging(serviceEnvironment) { _, new in new })
            let configuration = PipelineConfiguration(reader: reader)
            try reader.validate()
            return configuration
        }
    }

    /// A notification as the ingress stores it: signed by the slice's signer, sealed with its key.
    func storedNotification(
        type: NotificationTypeV2, subtype: Subtype? = nil, transaction: JWSTransactionDecodedPayload?,
        renewal: JWSRenewalInfoDecodedPayload? = nil, environment: AppStoreEnvironment = .sandbox
    ) throws -> NewNotificationEvent {
        let uuid = UUID()
        let jws = try signer.signNotification(
            type: type, subtype: subtype, bundleId: IngressHarness.bundleID, environment: environment,
            transaction: transaction, renewalInfo: renewal, notificationUUID: uuid)
        let reader = ConfigurationReader(environment: appleSettings)
        let cipher = try #require(PayloadCipher(reader: reader))
        let context = uuid.uuidString.lowercased()
        let sealed = try cipher.seal(Array(jws.utf8), context: context)
        let original = transaction?.originalTransactionId
        return NewNotificationEvent(
            notificationUUID: context, notificationType: type.rawValue, subtype: subtype?.rawValue,
            environment: environment.rawValue, transactionID: transaction?.transactionId,
            originalTransactionID: original, routingKey: original ?? context, sealedPayload: sealed.sealed,
            payloadKeyID: sealed.keyID)
    }

    func startWorker(_ name: String) throws -> ServiceProcess {
        try ServiceProcess(
            executable: "fulfillment", name: name, environment: serviceEnvironment.merging(["WORKER_ID": name]) { _, n in n })
    }
}
