import Foundation
import TestSupport
import Testing

/// The ingress binary as operators run it: environment only, the schema waited for, probes.
@Suite(.timeLimit(.minutes(3)))
struct IngressProcessTests {
    @Test func startsFromItsEnvironmentAndAnswersTheProbes() async throws {
        let harness = try await IngressHarness.start()
        let ingress = harness.process
        defer { ingress.kill() }
        let client = harness.client
        let health = try await client.get("/healthz")
        #expect(health.status == 200)
        let ready = try await client.get("/readyz")
        #expect(ready.status == 200, "\(ready.text)")
        #expect(try ready.json()["postgres"] as? String == "ok")
        // Ready follows PostgreSQL alone; the broker's state is observed beside it, in the body.
        #expect(try await eventually(timeout: 60) { try await client.get("/readyz").json()["kafka"] as? String == "ok" })
        // Metrics only on the internal listener; the public port has none in any spelling.
        // (`//metrics` and dot segments: HTTPServerTests, over raw sockets.)
        for spelling in ["/metrics", "/metrics/", "/%6Detrics"] {
            #expect(try await client.get(spelling).status == 404, "\(spelling)")
        }
        #expect(try await harness.internalClient.get("/readyz").status == 200)
        let metrics = try await harness.internalClient.get("/metrics")
        #expect(metrics.status == 200)
        #expect(metrics.headers["content-type"]?.hasPrefix("text/plain") == true)
        #expect(metrics.text.contains("# TYPE http_server_request_duration_seconds histogram"))
        let missing = try await client.get("/nope")
        #expect(missing.status == 404)
        #expect(try missing.json()["code"] as? String == "NOT_FOUND")

        #expect(await ingress.terminate(timeout: 30) == 0, "\(ingress.output.suffix(2000))")
        #expect(ingress.output.contains("\"level\":\"info\",\"logger\":\"ingress\",\"message\":\"schema ready\""))
    }

    @Test func refusesToStartWithOneLinePerConfigurationProblem() async throws {
        let ingress = try ServiceProcess(
            executable: "ingress", name: "ingress-badconfig",
            environment: [
                "DATABASE_URL": "mysql://nope", "KAFKA_BROKERS": "nohost", "INGRESS_HTTP_PORT": "http",
                "APPLE_IAP_BUNDLE_ID": "", "PAYLOAD_ENCRYPTION_KEYS": "",
            ])
        let exited = await eventually(timeout: 30) { !ingress.isRunning }
        #expect(exited)
        #expect(await ingress.terminate() == 2)
        let output = ingress.output
        #expect(output.contains("DATABASE_URL: invalid value"))
        #expect(output.contains("KAFKA_BROKERS: invalid value 'nohost'; expected host:port"))
        #expect(output.contains("INGRESS_HTTP_PORT: invalid value 'http'"))
        #expect(output.contains("PAYLOAD_ENCRYPTION_KEYS: missing"))
        #expect(output.contains("APPLE_IAP_BUNDLE_ID: missing"))
    }
}
