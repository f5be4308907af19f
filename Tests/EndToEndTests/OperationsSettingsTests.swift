import Crypto
import Foundation
import Kafka
import Pipeline
import Postgres
import ServiceRuntime
import Storage
import TestSupport
import Testing
import Webhooks

@testable import FulfillmentApp

/// The operations settings are validated like every other (one problem per bad value), and the
/// backlog sampler runs in one worker at a time.
@Suite struct OperationsSettingsTests {
    static let base = ["DATABASE_URL": "postgresql://u:p@h:5432/d", "KAFKA_BROKERS": "h:9092"]

    /// The invalid values a worker reports (the App Store settings this test leaves out are only missing).
    static func problems(_ extra: [String: String]) -> [String] {
        let reader = ConfigurationReader(environment: base.merging(extra) { $1 })
        _ = FulfillmentConfiguration(reader: reader)
        return reader.problems.filter { $0.value != nil }.map(\.name)
    }

    @Test func defaultsAndValidValues() {
        let reader = ConfigurationReader(environment: Self.base)
        let pipeline = PipelineConfiguration(reader: reader)
        #expect(pipeline.eventTopicReplicationFactor == 1 && pipeline.eventTopicCreate && pipeline.logLevel == .info)
        let set = ConfigurationReader(
            environment: Self.base.merging([
                "EVENT_TOPIC_REPLICATION_FACTOR": "3", "EVENT_TOPIC_CREATE": "false", "LOG_LEVEL": "WARNING",
                "METRICS_SAMPLE_SECONDS": "30", "FULFILLMENT_STALL_SECONDS": "120",
            ]) { $1 })
        let configured = PipelineConfiguration(reader: set)
        #expect(configured.eventTopicReplicationFactor == 3 && !configured.eventTopicCreate && configured.logLevel == .warning)
        let worker = FulfillmentConfiguration(reader: set)
        #expect(worker.metricsSample == .seconds(30) && worker.stall == .seconds(120))
        #expect(FulfillmentConfiguration(reader: reader).metricsSample == .seconds(15))
    }

    /// Issue 26: the grace, the lease and static membership (the pod name, in Kubernetes only).
    @Test func shutdownGraceLeaseAndGroupInstance() {
        let plain = FulfillmentConfiguration(reader: ConfigurationReader(environment: Self.base.merging(["HOSTNAME": "laptop"]) { $1 }))
        #expect(plain.pipeline.shutdownGrace == .seconds(20) && plain.lease == .seconds(10))
        #expect(plain.instanceID == nil, "outside Kubernetes a worker is a dynamic member")
        let pod = ["HOSTNAME": "fulfillment-7d9f-x2k", "KUBERNETES_SERVICE_HOST": "10.0.0.1"]
        #expect(
            FulfillmentConfiguration(reader: ConfigurationReader(environment: Self.base.merging(pod) { $1 })).instanceID == "fulfillment-7d9f-x2k")
        let named = Self.base.merging(pod.merging(["FULFILLMENT_INSTANCE_ID": "worker-3"]) { $1 }) { $1 }
        #expect(FulfillmentConfiguration(reader: ConfigurationReader(environment: named)).instanceID == "worker-3")
        let off = Self.base.merging(pod.merging(["FULFILLMENT_INSTANCE_ID": ""]) { $1 }) { $1 }
        #expect(FulfillmentConfiguration(reader: ConfigurationReader(environment: off)).instanceID == nil)
        let set = Self.base.merging(["SHUTDOWN_GRACE_SECONDS": "45"]) { $1 }
        #expect(PipelineConfiguration(reader: ConfigurationReader(environment: set)).shutdownGrace == .seconds(45))
    }

    @Test(arguments: [
        ("SHUTDOWN_GRACE_SECONDS", "0"), ("FULFILLMENT_LEASE_SECONDS", "1"), ("LOG_LEVEL", "verbose"), ("LOG_LEVEL", "warn"),
        ("EVENT_TOPIC_REPLICATION_FACTOR", "0"),
        ("EVENT_TOPIC_REPLICATION_FACTOR", "three"), ("EVENT_TOPIC_CREATE", "maybe"), ("METRICS_SAMPLE_SECONDS", "0"),
        ("FULFILLMENT_STALL_SECONDS", "1"),
    ])
    func aBadValueIsOneProblemNamingItsVariable(name: String, value: String) {
        #expect(Self.problems([name: value]) == [name])
    }

    /// Finish Transaction is off by default, and on only with the App Store Server API key to call it with.
    @Test func finishTransactionsNeedTheAPIKey() throws {
        #expect(!FulfillmentConfiguration(reader: ConfigurationReader(environment: Self.base)).schedulers.finishTransactions)
        let reader = ConfigurationReader(environment: Self.base.merging(["APPLE_FINISH_TRANSACTIONS": "true"]) { $1 })
        _ = FulfillmentConfiguration(reader: reader)
        let refusal = try #require(reader.problems.first { $0.name == "APPLE_FINISH_TRANSACTIONS" })
        #expect(refusal.description.contains("APPLE_IAP_KEY_ID"), "\(refusal)")
        let keyPath = FileManager.default.temporaryDirectory.appendingPathComponent("finish-key-\(UUID().uuidString).p8")
        try Data(P256PrivateKey.generate().pemPKCS8().utf8).write(to: keyPath)
        defer { try? FileManager.default.removeItem(at: keyPath) }
        let keyed = ConfigurationReader(
            environment: Self.base.merging([
                "APPLE_FINISH_TRANSACTIONS": "true", "APPLE_IAP_ISSUER_ID": "issuer", "APPLE_IAP_KEY_ID": "KEY0000001",
                "APPLE_IAP_PRIVATE_KEY_PATH": keyPath.path, "APPLE_IAP_BUNDLE_ID": "com.example.app", "APPLE_IAP_ENV": "Sandbox",
            ]) { $1 })
        #expect(FulfillmentConfiguration(reader: keyed).schedulers.finishTransactions)
        #expect(!keyed.problems.contains { $0.name == "APPLE_FINISH_TRANSACTIONS" })
    }

    /// Forwarding: one target for both environments, or Sandbox's apart; a URL that can never be
    /// sent to is refused at start-up, naming its variable.
    @Test func forwardingTargetsAndTheirChecks() {
        func webhooks(_ extra: [String: String]) -> (WebhookConfiguration, [String]) {
            let reader = ConfigurationReader(environment: Self.base.merging(extra) { $1 })
            return (WebhookConfiguration(reader: reader), reader.problems.map(\.name))
        }
        let (none, clean) = webhooks([:])
        #expect(none.forwardTargets.isEmpty && clean.isEmpty)
        let (one, _) = webhooks(["APPLE_NOTIFICATION_FORWARD_URL": "https://old.example.com/apple"])
        #expect(one.forwardTargets.map(\.id) == [WebhookConfiguration.forwardEndpointID])
        #expect(one.forwardTargets[0].environments == nil)
        let (two, _) = webhooks([
            "APPLE_NOTIFICATION_FORWARD_URL": "https://old.example.com/apple",
            "APPLE_NOTIFICATION_FORWARD_SANDBOX_URL": "https://old.example.com/apple-sandbox",
        ])
        #expect(two.forwardTargets.map(\.url) == ["https://old.example.com/apple", "https://old.example.com/apple-sandbox"])
        #expect(two.forwardTargets.map(\.environments) == [["Production"], ["Sandbox", "Xcode", "LocalTesting"]])
        #expect(webhooks(["APPLE_NOTIFICATION_FORWARD_URL": "http://old.example.com/apple"]).1 == ["APPLE_NOTIFICATION_FORWARD_URL"])
        #expect(
            webhooks(["APPLE_NOTIFICATION_FORWARD_URL": "http://old.example.com/apple", "WEBHOOK_ALLOW_HTTP": "true"]).1.isEmpty)
        #expect(webhooks(["APPLE_NOTIFICATION_FORWARD_URL": "old.example.com"]).1 == ["APPLE_NOTIFICATION_FORWARD_URL"])
        #expect(
            webhooks(["APPLE_NOTIFICATION_FORWARD_SANDBOX_URL": "https://old.example.com/apple-sandbox"]).1
                == ["APPLE_NOTIFICATION_FORWARD_URL"])
    }

    @Test func oneWorkerSamplesAndAnotherTakesOverWhenItStops() async throws {
        try await withTestDatabase("sampler") { database in
            let lag = [KafkaPartitionLag(topic: "t", partition: 0, committed: 3, highWatermark: 10, lag: 7)]
            func sampler() -> BacklogSampler {
                BacklogSampler(
                    configuration: TestEnvironment.poolConfiguration(url: database.url, maximumConnections: 2), interval: .milliseconds(100),
                    logger: Logger(label: "test", level: .warning),
                    lag: { lag })
            }
            func leads(_ sampler: BacklogSampler) -> Bool {
                sampler.families.contains { $0.name == "subs_metrics_sampler_leader" && $0.samples[0].value == 1 }
            }
            let first = sampler()
            let second = sampler()
            let firstRun = Task { try await first.run() }
            let secondRun = Task { try await second.run() }
            #expect(await eventually { leads(first) != leads(second) })
            let (leader, other) = leads(first) ? (first, second) : (second, first)
            let gauges = Set(leader.families.map(\.name))
            #expect(gauges.isSuperset(of: ["subs_events", "subs_outbox_messages", "subs_kafka_consumer_lag", "subs_tasks"]))
            // The other exports only that it does not lead.
            #expect(other.families.map(\.name) == ["subs_metrics_sampler_leader"])
            let text = leader.families.first { $0.name == "subs_kafka_consumer_lag" }!.samples
            #expect(text.count == 1 && text[0].labels == ["topic": "t", "partition": "0"] && text[0].value == 7)

            await leader.shutdown()
            #expect(await eventually { leads(other) })
            #expect(!leads(leader))
            await other.shutdown()
            try await firstRun.value
            try await secondRun.value
        }
    }
}

/// The event topic at start-up: created with the configured partitions, or with
/// `EVENT_TOPIC_CREATE=false` only checked; fewer partitions than configured is a metric.
@Suite struct EventTopicBootstrapTests {
    static func pipeline(_ settings: [String: String]) -> PipelineConfiguration {
        PipelineConfiguration(
            reader: ConfigurationReader(environment: ProcessInfo.processInfo.environment.merging(settings) { $1 }))
    }

    static func gauge(_ name: String, topic: String) -> String? {
        MetricsRegistry.shared.prometheusText().split(separator: "\n")
            .first { $0.hasPrefix("\(name){topic=\"\(topic)\"} ") }.map { String($0.split(separator: " ").last!) }
    }

    @Test func aMissingTopicIsAnErrorWhenCreatingIsOffAndFewerPartitionsAMetric() async throws {
        _ = try TestEnvironment.kafkaConfiguration()
        let topic = TestEnvironment.uniqueName("topic")
        let logger = Logger(label: "test", level: .error)
        // The shared broker can be slow to answer while the other suites start and stop brokers of
        // their own: a request that timed out is asked again (the answers are what is tested).
        func ensure(_ configuration: PipelineConfiguration) async throws -> Int {
            var attempt = 0
            while true {
                attempt += 1
                do {
                    return try await Bootstrap.ensureTopic(configuration: configuration, logger: logger)
                } catch let error as KafkaError where error.code == .timedOut && attempt < 5 {
                    continue
                }
            }
        }
        let noCreate = Self.pipeline(["EVENT_TOPIC": topic, "EVENT_TOPIC_PARTITIONS": "2", "EVENT_TOPIC_CREATE": "false"])
        await #expect(throws: TopicMissing.self) { try await ensure(noCreate) }

        let create = Self.pipeline(["EVENT_TOPIC": topic, "EVENT_TOPIC_PARTITIONS": "2", "EVENT_TOPIC_REPLICATION_FACTOR": "1"])
        #expect(try await ensure(create) == 2)
        #expect(Self.gauge("subs_event_topic_partitions", topic: topic) == "2")

        // Configured for more than the topic has: it is used as it is, and the gap is visible.
        let more = Self.pipeline(["EVENT_TOPIC": topic, "EVENT_TOPIC_PARTITIONS": "4", "EVENT_TOPIC_CREATE": "false"])
        #expect(try await ensure(more) == 2)
        #expect(Self.gauge("subs_event_topic_partitions", topic: topic) == "2")
        #expect(Self.gauge("subs_event_topic_partitions_configured", topic: topic) == "4")
    }
}
