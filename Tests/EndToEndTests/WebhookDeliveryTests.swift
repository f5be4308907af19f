import Crypto
import Foundation
import FulfillmentApp
import Kafka
import Pipeline
import Postgres
import ServiceRuntime
import Storage
import TestSupport
import Testing
import Webhooks

/// Webhook delivery against a real receiver: events produced to the outbound topic reach the
/// endpoints whose filters take them, each request's signature checked by the Standard Webhooks
/// reference implementation (Tests/Webhooks/webhook_receiver.py, the `standardwebhooks` package);
/// 500s are retried, an endpoint that never answers 2xx ends DEAD, a rotation signs with both
/// secrets, and a manual retry sends the same webhook-id again.
@Suite(.serialized) struct WebhookDeliveryTests {
    /// The receiver process, its port and its secrets file.
    struct Receiver {
        let process: ServiceProcess
        let port: Int
        let secretsFile: URL

        static func start() async throws -> Receiver {
            let python = ServiceProcess.localState.appendingPathComponent("venv/bin/python")
            let script = ServiceProcess.packageRoot.appendingPathComponent("Tests/Webhooks/webhook_receiver.py")
            let secretsFile = FileManager.default.temporaryDirectory.appendingPathComponent("webhook-secrets-\(UUID().uuidString).json")
            try Data("{}".utf8).write(to: secretsFile)
            let process = try ServiceProcess(
                executablePath: python.path, name: "webhook-receiver", arguments: [script.path, secretsFile.path], environment: [:])
            guard await process.waitForOutput("listening ", timeout: 30),
                let line = process.output.split(separator: "\n").first(where: { $0.hasPrefix("listening ") }),
                let port = Int(line.dropFirst("listening ".count))
            else {
                process.kill()
                throw MissingServiceError(variable: "the webhook receiver (needs standardwebhooks in the venv): \(process.output)")
            }
            return Receiver(process: process, port: port, secretsFile: secretsFile)
        }

        func setSecrets(_ secrets: [String: [String: String]]) throws {
            try JSONSerialization.data(withJSONObject: secrets).write(to: secretsFile)
        }

        /// One line per request received so far.
        var requests: [[String: Any]] {
            process.output.split(separator: "\n").filter { $0.hasPrefix("{") }.compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
        }

        func requests(path: String) -> [[String: Any]] { requests.filter { $0["path"] as? String == path } }
    }

    /// The delivery running in process on a database and topic of its own.
    struct Rig {
        let database: TestDatabase
        let store: WebhookStore
        let cipher: PayloadCipher
        let topic: String
        let producer: KafkaProducer
        let delivery: WebhookDelivery
        let task: Task<Void, any Error>

        static func start(settings: [String: String] = [:]) async throws -> Rig {
            let database = try await TestDatabase.make("webhooks")
            let topic = TestEnvironment.uniqueName("outbound")
            let kafka = try TestEnvironment.kafkaConfiguration()
            let logger = Logger(label: "test", level: .warning)
            _ = try await KafkaAdmin(configuration: kafka, logger: logger).createTopic(topic, partitions: 2)
            let environment = [
                "OUTBOUND_EVENT_TOPIC": topic, "WEBHOOK_CONSUMER_GROUP": TestEnvironment.uniqueName("webhooks"),
                "WEBHOOK_ALLOW_HTTP": "true", "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true", "WEBHOOK_RETRY_BASE_MS": "20",
                "WEBHOOK_RETRY_MAX_MS": "100", "WEBHOOK_MAX_ATTEMPTS": "3", "WEBHOOK_TIMEOUT_MS": "30000",
                "WEBHOOK_CONCURRENCY": "4", "WEBHOOK_ENDPOINT_CONCURRENCY": "2",
            ].merging(settings) { _, new in new }
            let reader = ConfigurationReader(environment: environment)
            let configuration = WebhookConfiguration(reader: reader)
            try reader.validate()
            let cipher = PayloadCipher(keys: [("test", SecureRandom.bytes(32))])
            let store = WebhookStore(pool: database.pool)
            let delivery = try WebhookDelivery(
                store: store, cipher: cipher, configuration: configuration, kafka: kafka, topic: topic, owner: "test-sender",
                sampleInterval: .seconds(1), logger: logger)
            let producer = try KafkaProducer(configuration: kafka, logger: logger)
            let task = Task {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for service in delivery.services + [producer] { group.addTask { try await service.run() } }
                    try await group.waitForAll()
                }
            }
            return Rig(
                database: database, store: store, cipher: cipher, topic: topic, producer: producer, delivery: delivery, task: task)
        }

        func stop() async {
            await delivery.consumer.shutdown()
            await delivery.sender.shutdown()
            await producer.shutdown()
            task.cancel()
            await database.close()
        }

        /// Registers an endpoint with a new secret; returns its id and secret.
        func endpoint(_ url: String, types: [String]? = nil) async throws -> (id: String, secret: String) {
            let id = "wh_" + Hex.encode(SecureRandom.bytes(8))
            let secret = WebhookSigning.newSecret()
            try await store.create(
                WebhookStore.Endpoint(
                    id: id, url: url, eventTypes: types, environments: nil, description: "test",
                    secret: try WebhookSigning.seal(secret, endpointID: id, cipher: cipher)),
                operator: "test")
            return (id, secret)
        }

        /// Produces an outbound event as the relay would; returns its id.
        @discardableResult
        func publish(type: String, user: String = "u1") async throws -> String {
            let id = "evt_" + Hex.encode(SecureRandom.bytes(16))
            let event: [String: Any] = [
                "id": id, "type": type, "occurredAt": "2026-12-07T03:00:00.000Z", "userId": user, "sequence": 1,
                "environment": "Sandbox", "data": ["entitlement": "pro"],
            ]
            _ = try await producer.send(
                topic: topic, key: Array(user.utf8), value: Array(try JSONSerialization.data(withJSONObject: event)))
            return id
        }

        func delivery(_ endpoint: String, _ event: String) async throws -> WebhookStore.Delivery? {
            try await store.delivery(endpoint, event)
        }

        func wait(_ endpoint: String, _ event: String, for status: WebhookStore.Status) async throws -> WebhookStore.Delivery? {
            try await store.wait(endpoint, event, for: status)
        }
    }

    @Test func deliversSignedRetriesGivesUpAndRetriesByHand() async throws {
        let receiver = try await Receiver.start()
        defer { receiver.process.kill() }
        let rig = try await Rig.start()
        let base = "http://127.0.0.1:\(receiver.port)"
        let flaky = try await rig.endpoint(base + "/flaky/2")
        let failing = try await rig.endpoint(base + "/fail")
        let ordersOnly = try await rig.endpoint(base + "/orders", types: ["order.fulfilled"])
        try receiver.setSecrets([
            "/flaky/2": ["current": flaky.secret], "/fail": ["current": failing.secret], "/orders": ["current": ordersOnly.secret],
        ])

        let granted = try await rig.publish(type: "entitlement.granted")
        let fulfilled = try await rig.publish(type: "order.fulfilled")

        // Two 500s, then 204: delivered on the third attempt.
        for event in [granted, fulfilled] {
            let delivered = try #require(try await rig.wait(flaky.id, event, for: .delivered))
            #expect(delivered.attempts == 3)
            #expect(delivered.lastStatusCode == 204)
        }
        // Always 500: DEAD after WEBHOOK_MAX_ATTEMPTS, with the last answer kept.
        let dead = try #require(try await rig.wait(failing.id, granted, for: .dead))
        #expect(dead.attempts == 3)
        #expect(dead.lastStatusCode == 500)
        #expect(dead.lastError?.contains("500") == true)
        // The filter: only the order event for the orders endpoint.
        #expect(try await rig.wait(ordersOnly.id, fulfilled, for: .delivered)?.attempts == 1)
        #expect(try await rig.delivery(ordersOnly.id, granted) == nil)

        // Every request carried one signature, and the reference implementation accepted it.
        // Three attempts of two events to each of the flaky and failing endpoints, one to the orders
        // endpoint; the receiver's lines arrive through a pipe, a moment after the table says so.
        let least = 13
        _ = await eventually(timeout: 30) { receiver.requests.count >= least }
        let requests = receiver.requests
        #expect(requests.count >= least, "\(requests)")
        for request in requests {
            #expect(request["verified"] as? [String: Bool] == ["current": true], "\(request)")
            #expect(request["signatures"] as? Int == 1)
        }
        #expect(Set(receiver.requests(path: "/flaky/2").compactMap { $0["id"] as? String }) == [granted, fulfilled])
        #expect(receiver.requests(path: "/orders").map { $0["type"] as? String } == ["order.fulfilled"])

        // A manual retry of the DEAD delivery: one more attempt, the same webhook-id.
        let retried = try #require(
            try await rig.store.retry(endpointID: failing.id, eventID: granted, operator: "test", reason: "endpoint fixed"))
        #expect(retried.status == .pending)
        _ = try await rig.wait(failing.id, granted, for: .dead)
        _ = await eventually(timeout: 60) { receiver.requests(path: "/fail").filter { $0["id"] as? String == granted }.count == 4 }
        let after = try await rig.delivery(failing.id, granted)
        #expect(
            receiver.requests(path: "/fail").filter { $0["id"] as? String == granted }.count == 4,
            "delivery: \(String(describing: after)); receiver: \(receiver.requests(path: "/fail"))")
        #expect(after?.attempts == 4)

        // The same event read again (a redelivery on the topic) adds no delivery.
        #expect(
            try await rig.store.enqueue(eventID: granted, type: "entitlement.granted", environment: "Sandbox", payload: Array("{}".utf8))
                == 0)
        await rig.stop()
    }

    @Test func rotationSignsWithBothSecretsDuringTheOverlap() async throws {
        let receiver = try await Receiver.start()
        defer { receiver.process.kill() }
        let rig = try await Rig.start()
        let endpoint = try await rig.endpoint("http://127.0.0.1:\(receiver.port)/rotating")
        let newSecret = WebhookSigning.newSecret()
        #expect(
            try await rig.store.rotate(
                endpoint.id, to: try WebhookSigning.seal(newSecret, endpointID: endpoint.id, cipher: rig.cipher), overlap: .seconds(3600),
                operator: "test", reason: "rotation test"))
        try receiver.setSecrets(["/rotating": ["old": endpoint.secret, "new": newSecret, "other": WebhookSigning.newSecret()]])

        let event = try await rig.publish(type: "entitlement.renewed")
        #expect(try await rig.wait(endpoint.id, event, for: .delivered) != nil)
        let request = try #require(receiver.requests(path: "/rotating").first)
        // Either secret verifies the same request; a secret never issued does not.
        #expect(request["verified"] as? [String: Bool] == ["old": true, "new": true, "other": false], "\(request)")
        #expect(request["signatures"] as? Int == 2)

        // Once the overlap is over, only the new secret signs.
        #expect(
            try await rig.store.rotate(
                endpoint.id, to: try WebhookSigning.seal(newSecret, endpointID: endpoint.id, cipher: rig.cipher), overlap: .zero,
                operator: "test", reason: "end the overlap"))
        let later = try await rig.publish(type: "entitlement.renewed")
        #expect(try await rig.wait(endpoint.id, later, for: .delivered) != nil)
        let second = try #require(receiver.requests(path: "/rotating").first { $0["id"] as? String == later })
        #expect(second["signatures"] as? Int == 1)
        #expect((second["verified"] as? [String: Bool])?["new"] == true)
        #expect((second["verified"] as? [String: Bool])?["other"] == false)
        await rig.stop()
    }

    /// With private networks refused, a URL on loopback registered anyway (the setting changed
    /// since) is refused at connect time, and the attempt says so.
    @Test func connectTimeRefusalFailsTheAttempt() async throws {
        let receiver = try await Receiver.start()
        defer { receiver.process.kill() }
        let rig = try await Rig.start(settings: ["WEBHOOK_ALLOW_PRIVATE_NETWORKS": "false", "WEBHOOK_MAX_ATTEMPTS": "1"])
        let endpoint = try await rig.endpoint("http://localhost:\(receiver.port)/ok")
        let event = try await rig.publish(type: "entitlement.granted")
        let dead = try #require(try await rig.wait(endpoint.id, event, for: .dead))
        #expect(dead.lastStatusCode == nil)
        #expect(dead.lastError?.contains("refused to connect to") == true, "\(dead)")
        #expect(receiver.requests.isEmpty)
        await rig.stop()
    }
}

extension WebhookStore {
    /// The delivery of `event` to `endpoint`, if there is one.
    func delivery(_ endpoint: String, _ event: String) async throws -> WebhookStore.Delivery? {
        try await deliveries(endpointID: endpoint, status: nil, beforeSeq: nil, limit: 100).first { $0.eventId == event }
    }

    /// Waits until the delivery reaches `status`; returns it as it then is.
    func wait(_ endpoint: String, _ event: String, for status: WebhookStore.Status, timeout: TimeInterval = 60) async throws
        -> WebhookStore.Delivery?
    {
        var last: WebhookStore.Delivery?
        _ = try await eventually(timeout: timeout, every: .milliseconds(50)) {
            last = try await delivery(endpoint, event)
            return last?.status == status
        }
        return last
    }
}
