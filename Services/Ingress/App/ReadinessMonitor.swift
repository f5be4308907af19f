import Foundation
import HTTPServer
import Kafka
import Pipeline
import Postgres
import ServiceRuntime
import Storage
import Synchronization

/// The dependencies' state as `/readyz` reports it, observed in the background: a probe reads
/// the last observation and costs no I/O, however many load balancers ask how often (a broker
/// client per call once took the ingress from 29 to 545 threads under 128 callers).
///
/// Ready means PostgreSQL answers: with it the ingress stores every notification and its outbox
/// row, so a broker outage only delays publishing (the sweeper catches up) and must not take the
/// pods out of the Service (Apple's webhook and the client API with them). The broker's state is
/// in the body and in `subs_broker_up`; a growing outbox raises `SubsOutboxBacklogOld`. From the
/// moment the process is asked to stop it answers 503, so load balancers stop sending while the
/// requests in flight finish. Before the schema has every migration the binary carries (the
/// set-up Job has not finished) it answers 503 with what it waits for in `schema`.
final class ReadinessMonitor: Service, Sendable {
    /// Body of `/readyz`: each dependency's state.
    struct Readiness: Encodable, Equatable {
        var status: String
        var postgres: String
        var kafka: String
        /// "ok", or the migrations awaited (`waiting for 36, at 35`).
        var schema: String
    }

    let name = "readiness"
    /// Between observations (default 500 ms: a healthy answer is at most about a second old, an
    /// outage shows within two observations).
    let interval: Duration
    /// An observation older than this means observing has stalled: not ready.
    static let staleAfter = Duration.seconds(5)
    /// Failed probes in a row before a dependency that answered is reported down: one slow
    /// metadata answer from a busy broker is not an outage (load balancers act on every 503).
    static let failuresToReport = 2
    private let probePostgres: @Sendable () async -> String
    private let probeKafka: @Sendable () async -> String
    /// Set while the process waits for its schema (Bootstrap); "ok" afterwards.
    let schema: SchemaGate
    private let latest = Mutex<(readiness: Readiness, at: ContinuousClock.Instant)?>(nil)
    /// Failed probes in a row, PostgreSQL's and the broker's.
    private let failures = Mutex((postgres: 0, kafka: 0))
    private let stopped = ShutdownTrigger()
    private let draining = Atomic<Bool>(false)
    private let observations = MetricsRegistry.shared.counter(
        "subs_readiness_observations_total", help: "Background observations of the dependencies behind /readyz")
    private let brokerUp = MetricsRegistry.shared.gauge(
        "subs_broker_up", help: "1 when the broker answered the last readiness observation with the event topic")

    /// Observes through the running pool (one query) and the running producer's own client (its
    /// metadata: the broker up and the event topic known).
    convenience init(
        pool: PostgresPool, producer: KafkaProducer, topic: String, schema: SchemaGate, interval: Duration = .milliseconds(500)
    ) {
        self.init(
            interval: interval, schema: schema,
            postgres: {
                (try? await DatabaseProbe.check(pool)) == nil ? "unavailable" : "ok"
            },
            kafka: {
                switch await Result(catching: { try await producer.partitionCount(topic, timeout: .seconds(1)) }) {
                case .success(let count?) where count > 0: "ok"
                case .success: "topic missing"
                case .failure: "unavailable"
                }
            })
    }

    /// Each probe answers "ok" or what is wrong.
    init(
        interval: Duration, schema: SchemaGate = .ready, postgres: @escaping @Sendable () async -> String,
        kafka: @escaping @Sendable () async -> String
    ) {
        self.interval = interval
        self.schema = schema
        probePostgres = postgres
        probeKafka = kafka
    }

    func run() async throws {
        while true {
            await observe()
            if await stopped.wait(timeout: interval) { return }
        }
    }

    func shutdown() async { stopped.fire() }

    func shutdownRequested() { draining.store(true, ordering: .relaxed) }

    /// One observation of both dependencies, at once. A dependency that was up stays reported up
    /// until `failuresToReport` probes in a row failed.
    func observe() async {
        async let postgres = probePostgres()
        async let kafka = probeKafka()
        let (pg, broker) = await (postgres, kafka)
        observations.increment()
        let previous = latest.withLock { $0?.readiness }
        let reported = failures.withLock { counts -> (String, String) in
            counts.postgres = pg == "ok" ? 0 : counts.postgres + 1
            counts.kafka = broker == "ok" ? 0 : counts.kafka + 1
            func shown(_ now: String, _ before: String?, _ failed: Int) -> String {
                now != "ok" && before == "ok" && failed < Self.failuresToReport ? "ok" : now
            }
            return (shown(pg, previous?.postgres, counts.postgres), shown(broker, previous?.kafka, counts.kafka))
        }
        brokerUp.set(reported.1 == "ok" ? 1 : 0)
        let ready = reported.0 == "ok"
        latest.withLock {
            $0 = (
                Readiness(status: ready ? "ready" : "not ready", postgres: reported.0, kafka: reported.1, schema: "ok"),
                ContinuousClock.now
            )
        }
    }

    /// 200 with the last observation when it is recent and PostgreSQL is up, else 503 (also
    /// before the first observation, when observing has stalled, while the schema is awaited
    /// and once stopping).
    func response() -> HTTPResponse {
        let stale = Readiness(status: "not ready", postgres: "unknown", kafka: "unknown", schema: schema.status)
        var readiness = latest.withLock { latest -> Readiness in
            guard let latest, ContinuousClock.now - latest.at <= Self.staleAfter else { return stale }
            return latest.readiness
        }
        if let waiting = schema.waitingFor {
            readiness.status = "not ready"
            readiness.schema = waiting
        }
        if draining.load(ordering: .relaxed) { readiness.status = "shutting down" }
        return .json(readiness, status: readiness.status == "ready" ? 200 : 503)
    }
}
