import Crypto
import Foundation
import HTTPServer
import Kafka
import Pipeline
import Postgres
import ServiceRuntime
import Storage
import Synchronization
import TestSupport
import Testing
import Webhooks

/// Webhook delivery figures (issue 24), printed, never asserted: `Tests/Benchmarks/webhook-deliveries.sh`
/// runs it (SUBS_RUN_BENCHMARKS=1) and it is reported as skipped otherwise. A fulfillment process
/// (release-built by the script) delivers a steady stream of events produced to the outbound topic
/// to a local receiver; from each event's hand-over to the broker to its arrival at the receiver.
@Suite(
    .serialized, .timeLimit(.minutes(10)),
    .enabled(if: ProcessInfo.processInfo.environment["SUBS_RUN_BENCHMARKS"] == "1", "benchmark: run webhook-deliveries.sh"))
struct WebhookBenchmarkTests {
    static var rate: Int { Int(ProcessInfo.processInfo.environment["BENCH_OFFERED_RATE"] ?? "") ?? 1200 }
    static var seconds: Int { Int(ProcessInfo.processInfo.environment["BENCH_SECONDS"] ?? "") ?? 10 }

    static func event(_ id: String, _ user: String) -> [UInt8] {
        Array(
            #"{"id":"\#(id)","type":"entitlement.renewed","occurredAt":"2026-12-07T03:00:00.000Z","userId":"\#(user)","sequence":1,"environment":"Production","data":{"entitlement":"pro","productId":"com.example.pro.monthly"}}"#
                .utf8)
    }

    @Test func steadyStreamToOneLocalReceiver() async throws {
        let harness = try await PipelineHarness.make(partitions: 6)
        let configuration = try harness.configuration
        let logger = harness.logger
        let pool = PostgresPool(configuration: configuration.postgres, logger: logger)
        try await Bootstrap.prepare(configuration: configuration, pool: pool, logger: logger)
        let topic = TestEnvironment.uniqueName("outbound")
        _ = try await KafkaAdmin(configuration: configuration.kafka, logger: logger).createTopic(topic, partitions: 6)

        // The receiver: 204 at once, the arrival time of each webhook-id kept.
        let arrivals = Times()
        var router = Router()
        router.post("/hook") { request in
            let id = request.header("webhook-id") ?? ""
            let now = Date()
            arrivals.times.withLock { $0[id] = now }
            return HTTPResponse(status: 204)
        }
        let receiver = HTTPServer(
            configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 4), router: router, logger: logger)
        try receiver.start()
        let cipher = try #require(PayloadCipher(reader: ConfigurationReader(environment: harness.appleSettings)))
        let id = "wh_bench" + Hex.encode(SecureRandom.bytes(4))
        try await WebhookStore(pool: pool).create(
            WebhookStore.Endpoint(
                id: id, url: "http://127.0.0.1:\(receiver.port)/hook", eventTypes: nil, environments: nil, description: "bench",
                secret: try WebhookSigning.seal(WebhookSigning.newSecret(), endpointID: id, cipher: cipher)),
            operator: "bench")

        let worker = try ServiceProcess(
            executable: "fulfillment", name: "webhook-bench-worker",
            environment: harness.serviceEnvironment.merging([
                "OUTBOUND_EVENT_TOPIC": topic, "WEBHOOK_DELIVERY_ENABLED": "true",
                "WEBHOOK_CONSUMER_GROUP": TestEnvironment.uniqueName("webhooks"),
                "WEBHOOK_ALLOW_HTTP": "true", "WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true", "LOG_LEVEL": "warning",
            ]) { _, new in new })
        defer { worker.kill() }
        let producer = try KafkaProducer(configuration: configuration.kafka, logger: logger)
        let producing = Task { try await producer.run() }

        // Warm-up: the worker has joined its groups once one event went through.
        _ = try await producer.send(topic: topic, key: Array("warm".utf8), value: Self.event("evt_warmup", "warm"))
        #expect(try await eventually(timeout: 120, every: .milliseconds(100)) { arrivals.times.withLock { $0["evt_warmup"] != nil } })

        let total = Self.rate * Self.seconds
        let sent = Times()
        let start = ContinuousClock.now
        let tick = Duration.milliseconds(10)
        let perTick = max(1, Self.rate / 100)
        try await withThrowingTaskGroup(of: Void.self) { group in
            var index = 0
            var due = start
            while index < total {
                let batch = (index..<min(total, index + perTick)).map { "evt_bench\($0)" }
                index += batch.count
                group.addTask {
                    for id in batch {
                        sent.times.withLock { $0[id] = Date() }
                        _ = try await producer.send(topic: topic, key: Array("user\(id.hashValue % 1000)".utf8), value: Self.event(id, "u"))
                    }
                }
                due += tick
                try await Task.sleep(until: due, clock: .continuous)
            }
            try await group.waitForAll()
        }
        _ = try await eventually(timeout: 300, every: .milliseconds(100)) { arrivals.times.withLock { $0.count } >= total + 1 }

        let (sends, received) = (sent.times.withLock { $0 }, arrivals.times.withLock { $0 })
        let latencies = sends.compactMap { id, at in received[id].map { $0.timeIntervalSince(at) } }.sorted()
        let first = sends.values.min() ?? Date()
        let last = received.filter { $0.key != "evt_warmup" }.values.max() ?? Date()
        let perSecond = Double(latencies.count) / max(0.001, last.timeIntervalSince(first))
        func percentile(_ p: Double) -> Double {
            latencies.isEmpty ? .nan : latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))] * 1000
        }
        print(
            String(
                format:
                    "webhook_deliveries events=%d delivered=%d offered_per_second=%d deliveries_per_second=%.0f p50_ms=%.1f p99_ms=%.1f max_ms=%.1f",
                total, latencies.count, Self.rate, perSecond, percentile(0.5), percentile(0.99), percentile(1.0)))
        let dead = try await pool.query("SELECT count(*) FROM webhook_delivery WHERE status <> 'DELIVERED'")[0].decode(0, as: Int.self)
        print("webhook_deliveries_not_delivered rows=\(dead)")
        // Where the time went: in the table (enqueued -> delivered) versus before it (the consumer).
        let stages = try await pool.query(
            """
            SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM delivered_at - created_at)::float8) * 1000 AS p50,
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM delivered_at - created_at)::float8) * 1000 AS p99,
                   extract(epoch FROM max(created_at) - min(created_at))::float8 AS enqueue_span,
                   extract(epoch FROM max(delivered_at) - min(delivered_at))::float8 AS delivery_span
              FROM webhook_delivery WHERE event_id LIKE 'evt_bench%'
            """
        ).single()
        print(
            String(
                format: "webhook_deliveries_stages table_p50_ms=%.1f table_p99_ms=%.1f enqueue_span_s=%.1f delivery_span_s=%.1f",
                try stages.decode("p50", as: Double.self), try stages.decode("p99", as: Double.self),
                try stages.decode("enqueue_span", as: Double.self), try stages.decode("delivery_span", as: Double.self)))
        await producer.shutdown()
        producing.cancel()
        await receiver.shutdown()
        await pool.shutdown()
    }
}

/// When each webhook-id was sent or received, shared with the tasks and the receiver's threads.
final class Times: Sendable {
    let times = Mutex<[String: Date]>([:])
}
