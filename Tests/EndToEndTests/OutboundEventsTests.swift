import AppStore
import AppStoreTestSupport
import Foundation
import Kafka
import Postgres
import ServiceRuntime
import TestSupport
import Testing

/// Outbound events through the real pair: Apple's notifications POSTed to the ingress, applied by
/// a worker whose relay publishes the events to the outbound topic, read back from the broker and
/// validated against the repository's JSON Schemas (Python `jsonschema` from the local venv).
@Suite(.serialized, .timeLimit(.minutes(4)))
struct OutboundEventsTests {
    static let day: TimeInterval = 86_400
    static let schemas = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Shared/Events/Schemas")

    static func id() -> String { String(UInt64.random(in: 3_000_000_000_000_000...3_999_999_999_999_999)) }

    /// Purchase, renewal and refund: each change once on the topic, in sequence order, valid
    /// against its schema; Apple's redeliveries and a late, older fact add nothing.
    @Test func purchaseRenewalAndRefundArePublishedOnceInOrder() async throws {
        let topic = TestEnvironment.uniqueName("outbound")
        let harness = try await WorkerHarness.start(extra: ["OUTBOUND_EVENT_TOPIC": topic, "OUTBOUND_EVENT_TOPIC_PARTITIONS": "3"])
        defer { harness.stop() }
        let token = try await harness.user("alice")
        let now = Date()
        let id = Self.id()
        let purchase = harness.transaction(id, purchase: now - 10 * Self.day, token: token, signed: now - 7200)
        let renewal = harness.transaction(
            Self.id(), original: id, purchase: now - Self.day, token: token, reason: .renewal, signed: now - 3600)
        var refunded = renewal
        refunded.revocationDate = TestPayloads.wholeMilliseconds(now - 600)
        refunded.revocationReason = .refundedDueToIssue
        refunded.signedDate = TestPayloads.wholeMilliseconds(now - 600)

        let deliveries: [(NotificationTypeV2, Subtype?, JWSTransactionDecodedPayload, JWSRenewalInfoDecodedPayload?)] = [
            (.subscribed, .initialBuy, purchase, harness.renewalInfo(original: id, signed: now - 7200)),
            (.didRenew, nil, renewal, nil), (.refund, nil, refunded, nil),
        ]
        for (type, subtype, transaction, renewalInfo) in deliveries {
            let uuid = try await harness.notify(type, subtype, transaction: transaction, renewal: renewalInfo)
            #expect(try await harness.outcome(of: uuid) == .succeeded)
        }
        let expected = [
            "entitlement.granted", "order.fulfilled", "credits.granted",
            "entitlement.renewed", "order.fulfilled", "credits.granted",
            "entitlement.revoked", "subscription.refunded", "credits.revoked",
        ]
        let published = try await Self.waitPublished(harness, count: expected.count)
        #expect(published, "every event published: \(harness.workers[0].output.suffix(2000))")

        // Apple delivers again (new notification UUIDs), and the renewal once more after its refund.
        for (type, subtype, transaction, renewalInfo) in deliveries.reversed() + [deliveries[1]] {
            let uuid = try await harness.notify(type, subtype, transaction: transaction, renewal: renewalInfo)
            #expect(try await harness.outcome(of: uuid) == .succeeded)
        }
        #expect(try await harness.count("SELECT count(*) FROM outbound_event") == expected.count)

        let messages = try await Self.consume(topic: topic, expected: expected.count)
        #expect(messages.count == expected.count, "\(messages.map(\.value))")
        let events = try messages.map { message in
            (key: message.key, event: try #require(try JSONSerialization.jsonObject(with: Data(message.value.utf8)) as? [String: Any]))
        }
        #expect(events.map { $0.event["type"] as? String } == expected)
        #expect(events.allSatisfy { $0.key == "alice" && $0.event["userId"] as? String == "alice" })
        #expect(events.map { $0.event["sequence"] as? Int } == Array(1...expected.count))
        #expect(Set(events.compactMap { $0.event["id"] as? String }).count == expected.count)
        let granted = try #require(events.first?.event["data"] as? [String: Any])
        #expect(granted["entitlement"] as? String == WorkerHarness.starter)
        #expect(granted["originalTransactionId"] as? String == id)
        #expect(granted["status"] as? String == "ACTIVE")
        #expect(events[8].event["data"].flatMap { ($0 as? [String: Any])?["amount"] as? String } == "1000")

        let problems = try Self.validate(messages.map(\.value))
        #expect(problems.isEmpty, "\(problems)")
    }

    /// With `OUTBOUND_EVENTS_ENABLED=false` a purchase writes no event.
    @Test func disabledWritesNothing() async throws {
        let harness = try await WorkerHarness.start(extra: ["OUTBOUND_EVENTS_ENABLED": "false"])
        defer { harness.stop() }
        let token = try await harness.user("bob")
        let id = Self.id()
        let uuid = try await harness.notify(.subscribed, .initialBuy, transaction: harness.transaction(id, token: token))
        #expect(try await harness.outcome(of: uuid) == .succeeded, "\(harness.workers[0].output.suffix(3000))")
        #expect(try await harness.subscription(id)?.status == "ACTIVE")
        #expect(try await harness.count("SELECT count(*) FROM outbound_event") == 0)
    }

    /// A delivery-only worker (`FULFILLMENT_ENABLED=false`, same binary) delivers, signed, what a
    /// fulfillment worker that delivers nothing applied and published.
    @Test func aDeliveryOnlyWorkerDeliversWhatAnotherApplied() async throws {
        let topic = TestEnvironment.uniqueName("outbound")
        let network = ["WEBHOOK_ALLOW_HTTP": "true", "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true"]
        let harness = try await WorkerHarness.start(
            extra: network.merging(["OUTBOUND_EVENT_TOPIC": topic, "OUTBOUND_EVENT_TOPIC_PARTITIONS": "3"]) { a, _ in a })
        defer { harness.stop() }
        let receiver = try await WebhookDeliveryTests.Receiver.start()
        defer { receiver.process.kill() }
        let created = try ServiceProcess(
            executable: "subsctl", name: "subsctl", environment: harness.ingress.environment,
            arguments: ["webhooks", "create", "--url", "http://127.0.0.1:\(receiver.port)/hook", "--json"])
        #expect(await created.waitForExit(timeout: 120) == 0, "\(created.output)")
        let endpoint = try #require(try JSONSerialization.jsonObject(with: Data(created.output.utf8)) as? [String: Any])
        try receiver.setSecrets(["/hook": ["current": try #require(endpoint["secret"] as? String)]])

        let delivering = try ServiceProcess(
            executable: "fulfillment", name: "delivery-only",
            environment: harness.ingress.environment.merging([
                "WORKER_ID": "delivery-only", "FULFILLMENT_ENABLED": "false", "WEBHOOK_DELIVERY_ENABLED": "true",
                "FULFILLMENT_HTTP_PORT": "0",
            ]) { _, new in new })
        defer { delivering.kill() }

        let token = try await harness.user("carol")
        let uuid = try await harness.notify(.subscribed, .initialBuy, transaction: harness.transaction(Self.id(), token: token))
        #expect(try await harness.outcome(of: uuid) == .succeeded)
        let delivered = await eventually(timeout: 90) { receiver.requests(path: "/hook").count >= 3 }
        #expect(delivered, "receiver: \(receiver.process.output.suffix(2000)); delivery-only: \(delivering.output.suffix(3000))")
        let requests = receiver.requests(path: "/hook")
        #expect(Set(requests.compactMap { $0["type"] as? String }) == ["entitlement.granted", "order.fulfilled", "credits.granted"])
        #expect(requests.allSatisfy { ($0["verified"] as? [String: Bool])?["current"] == true }, "\(requests)")
        #expect(try await harness.count("SELECT count(*) FROM processed_event WHERE worker_id = 'delivery-only'") == 0)
    }

    static func waitPublished(_ harness: WorkerHarness, count: Int) async throws -> Bool {
        try await eventually(timeout: 60) {
            let published = try await harness.count("SELECT count(*) FROM outbound_event WHERE published_at IS NOT NULL")
            let written = try await harness.count("SELECT count(*) FROM outbound_event")
            return published == count && written == count
        }
    }

    /// Reads the topic from the start: each message's key and value, in the order received (one
    /// user: one partition, so in offset order).
    static func consume(topic: String, expected: Int) async throws -> [(key: String, value: String)] {
        let seen = Locked<[(key: String, value: String)]>([])
        let consumer = try KafkaConsumer(
            configuration: KafkaConsumerConfiguration(
                kafka: try TestEnvironment.kafkaConfiguration(
                    brokers: try TestEnvironment.kafkaBrokers(),
                    properties: ["session.timeout.ms": "2000", "heartbeat.interval.ms": "500"]),
                groupID: TestEnvironment.uniqueName("outbound-check"), topics: [topic], maxConcurrentPartitions: 1),
            logger: Logger(label: "e2e", level: .warning)
        ) { message in
            let key = String(decoding: message.key ?? [], as: UTF8.self)
            seen.withLock { $0.append((key, String(decoding: message.value, as: UTF8.self))) }
        }
        let consuming = Task { try await consumer.run() }
        _ = await eventually(timeout: 60) { seen.value.count >= expected }
        // Anything beyond the expected count would show up within a moment.
        try? await Task.sleep(for: .seconds(1))
        await consumer.shutdown()
        _ = try? await consuming.value
        return seen.value
    }

    /// Each value against the envelope and its type's schema; the problems found (none: valid).
    static func validate(_ values: [String]) throws -> [String] {
        let python = ServiceProcess.localState.appendingPathComponent("venv/bin/python")
        guard FileManager.default.isExecutableFile(atPath: python.path) else {
            throw MissingServiceError(variable: "python with jsonschema in .local/venv (deploy/local/install.sh)")
        }
        let input = FileManager.default.temporaryDirectory.appendingPathComponent("outbound-\(UUID().uuidString).jsonl")
        try values.joined(separator: "\n").write(to: input, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: input) }
        let script = """
            import json, sys, pathlib
            from jsonschema import Draft202012Validator, FormatChecker
            schemas = pathlib.Path(sys.argv[1])
            load = lambda name: json.loads((schemas / name).read_text())
            envelope = load("envelope.json")
            Draft202012Validator.check_schema(envelope)
            problems = []
            for line in pathlib.Path(sys.argv[2]).read_text().splitlines():
                event = json.loads(line)
                schema = load(event.get("type", "?") + ".json")
                Draft202012Validator.check_schema(schema)
                for s in (envelope, schema):
                    problems += [f"{event.get('type')}: {e.message}" for e in Draft202012Validator(s, format_checker=FormatChecker()).iter_errors(event)]
            print("\\n".join(problems))
            sys.exit(1 if problems else 0)
            """
        let process = Process()
        process.executableURL = python
        process.arguments = ["-c", script, schemas.path, input.path]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return process.terminationStatus == 0 ? [] : [text.isEmpty ? "validator exited \(process.terminationStatus)" : text]
    }
}
