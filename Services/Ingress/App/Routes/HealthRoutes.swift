import HTTPServer
import Kafka
import Pipeline
import Postgres
import ServiceRuntime
import Storage

/// Liveness, readiness and metrics endpoints for the orchestrator and Prometheus.
struct HealthRoutes: Sendable {
    let pool: PostgresPool
    let configuration: PipelineConfiguration
    let logger: Logger

    func register(in router: inout Router<IngressRequestContext>) {
        router.get("/healthz") { _ in .json(["status": "ok"]) }
        router.get("/readyz") { _ in await readiness() }
        router.get("/metrics") { _ in
            .text(MetricsRegistry.shared.prometheusText(), contentType: "text/plain; version=0.0.4; charset=utf-8")
        }
    }

    /// Body of `/readyz`: each dependency's state.
    struct Readiness: Encodable {
        var status: String
        var postgres: String
        var kafka: String
    }

    /// Ready when PostgreSQL answers and the broker knows the event topic.
    func readiness() async -> HTTPResponse {
        var state = Readiness(status: "ready", postgres: "ok", kafka: "ok")
        do {
            try await DatabaseProbe.check(pool)
        } catch {
            state.postgres = "unavailable"
        }
        do {
            let admin = KafkaAdmin(configuration: configuration.kafka, logger: logger)
            if try await admin.partitionCount(configuration.eventTopic) == nil { state.kafka = "topic missing" }
        } catch {
            state.kafka = "unavailable"
        }
        let ready = state.postgres == "ok" && state.kafka == "ok"
        if !ready { state.status = "not ready" }
        return .json(state, status: ready ? 200 : 503)
    }
}
