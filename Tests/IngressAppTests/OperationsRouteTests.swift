import Foundation
import HTTPServer
import ServiceRuntime
import Testing

@testable import IngressApp

/// The probes and metrics: metrics only on the internal listener, readiness from the last
/// background observation.
@Suite(.timeLimit(.minutes(3)))
struct OperationsRouteTests {
    @Test func metricsAreServedOnlyOnTheInternalListenerWhateverTheSpelling() async throws {
        try await IngressTestApp.with { app in
            for spelling in ["/metrics", "//metrics", "/metrics/", "/%6Detrics", "/./metrics", "/api/../metrics", "/%2e/metrics"] {
                let response = await app.get(spelling)
                #expect(response.status == 404, "\(spelling)")
                #expect(response.code == "NOT_FOUND", "\(spelling)")
            }
            let metrics = await app.getInternal("/metrics")
            #expect(metrics.status == 200)
            #expect(metrics.header("content-type")?.hasPrefix("text/plain") == true)
            // Load balancers keep their probes on the public port; the orchestrator has them inside.
            for path in ["/healthz", "/readyz"] {
                #expect(await app.get(path).status != 404, "\(path)")
                #expect(await app.getInternal(path).status != 404, "\(path)")
            }
            #expect(await app.getInternal("/api/v1/subscriptions/current").status == 404)
        }
    }

    @Test func readinessAnswersTheLastObservationWithoutProbingPerCall() async throws {
        try await IngressTestApp.with { app in
            let unobserved = await app.get("/readyz")
            #expect(unobserved.status == 503)
            #expect(try unobserved.json()["postgres"] as? String == "unknown")
            await app.readiness.observe()
            let probes = app.readinessProbes.count
            #expect(probes == 2)
            let statuses = await withTaskGroup(of: Int.self) { group in
                for index in 0..<128 {
                    group.addTask { index % 2 == 0 ? await app.get("/readyz").status : await app.getInternal("/readyz").status }
                }
                return await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.allSatisfy { $0 == 200 }, "\(Set(statuses))")
            #expect(app.readinessProbes.count == probes, "a /readyz call probed a dependency itself")
            let body = try await app.get("/readyz").json()
            #expect(body["status"] as? String == "ready")
            #expect(body["kafka"] as? String == "ok")
        }
    }

    @Test func aDependencyIsReportedDownAfterTwoFailedObservationsInARow() async throws {
        let postgres = Locked("ok")
        let monitor = ReadinessMonitor(interval: .milliseconds(500), postgres: { postgres.value }, kafka: { "ok" })
        await monitor.observe()
        #expect(monitor.response().status == 200)
        postgres.withLock { $0 = "unavailable" }
        await monitor.observe()
        #expect(monitor.response().status == 200, "one slow or failed answer is not an outage")
        await monitor.observe()
        #expect(monitor.response().status == 503)
        postgres.withLock { $0 = "ok" }
        await monitor.observe()
        #expect(monitor.response().status == 200)
    }

    /// Issue 26: a broker outage fills the outbox but must not take the ingress out of the Service
    /// (the gauge: BrokerOutageTests, in a process of its own).
    @Test func withoutTheBrokerTheIngressStaysReadyAndSaysSoInTheBody() async throws {
        let broker = Locked("ok")
        let monitor = ReadinessMonitor(interval: .milliseconds(500), postgres: { "ok" }, kafka: { broker.value })
        await monitor.observe()
        broker.withLock { $0 = "unavailable" }
        await monitor.observe()
        await monitor.observe()
        let response = monitor.response()
        #expect(response.status == 200)
        let body = try #require(try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])
        #expect(body["status"] as? String == "ready")
        #expect(body["kafka"] as? String == "unavailable")
    }

    @Test func aStopTurnsReadinessTo503AtOnceWhileTheDependenciesAreFine() async throws {
        let monitor = ReadinessMonitor(interval: .milliseconds(500), postgres: { "ok" }, kafka: { "ok" })
        await monitor.observe()
        #expect(monitor.response().status == 200)
        monitor.shutdownRequested()
        let response = monitor.response()
        #expect(response.status == 503)
        let body = try #require(try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any])
        #expect(body["status"] as? String == "shutting down")
    }
}
