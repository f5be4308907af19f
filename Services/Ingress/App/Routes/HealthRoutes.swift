import Foundation
import HTTPServer
import ServiceRuntime
import Storage
import Synchronization

/// Liveness and readiness for load balancers and the orchestrator, on the public and the internal
/// listener alike; `/metrics` only on the internal one (`internalRouter`).
struct HealthRoutes: Sendable {
    let readiness: ReadinessMonitor

    func register<Context>(in router: inout Router<Context>) {
        router.get("/healthz") { _ in .json(["status": "ok"]) }
        router.get("/readyz") { _ in readiness.response() }
    }

    /// The internal listener's routes (`INTERNAL_HTTP_PORT`): probes and Prometheus metrics, kept
    /// off the port Apple and the clients reach.
    func internalRouter() -> Router<BasicRequestContext> {
        var router = Router()
        register(in: &router)
        router.get("/metrics") { _ in
            .text(MetricsRegistry.shared.prometheusText(), contentType: "text/plain; version=0.0.4; charset=utf-8")
        }
        return router
    }
}

extension Result where Failure == any Error {
    /// The outcome of an async throwing body.
    init(catching body: () async throws -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}
