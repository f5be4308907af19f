import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import Postgres
import ServiceRuntime
import Storage
import TestSupport
import Testing

/// The rules of deploy/UPGRADING.md, with the binaries: a release keeps working while the next
/// release's additive migration lands under it (a rolling upgrade, and the state after a rollback),
/// and a release started before its own migrations are applied waits for them, alive and not ready,
/// instead of migrating.
@Suite(.serialized, .timeLimit(.minutes(4)))
struct SchemaCompatibilityTests {
    static func id() -> String { String(UInt64.random(in: 3_000_000_000_000_000...3_999_999_999_999_999)) }

    /// The next release's migration as the rules allow it: a nullable column on every table (what
    /// a `SELECT *` or a positional `INSERT ... SELECT` would trip on) and a table of its own.
    static let nextRelease = Migration(
        version: 9_999, name: "next_release_additive",
        sql: """
            DO $$
            DECLARE t regclass;
            BEGIN
                FOR t IN SELECT c.oid::regclass FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                         WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND NOT c.relispartition
                           AND c.relname <> 'schema_migrations'
                LOOP
                    EXECUTE format('ALTER TABLE %s ADD COLUMN next_release_note text', t);
                END LOOP;
            END $$;
            CREATE TABLE next_release_feature (id bigint PRIMARY KEY, note text);
            """)

    @Test func runningServicesKeepWorkingWhenTheNextReleasesMigrationLands() async throws {
        let harness = try await WorkerHarness.start()
        defer { harness.stop() }
        // Warm: the connections have prepared their statements on the current schema.
        let (aliceOrder, aliceToken) = try await harness.order("alice")
        let aliceID = Self.id()
        let first = try await harness.submit(
            try harness.signer.sign(harness.transaction(aliceID, token: aliceToken)), orderNo: aliceOrder, as: "alice")
        #expect(first.status == 200, "\(first.text)")

        let applied = try await Migrator(pool: harness.pool, logger: Logger(label: "e2e", level: .warning))
            .migrate(Migrator.bundled() + [Self.nextRelease])
        #expect(applied == [Self.nextRelease.version])

        // The same binaries on the wider schema: a purchase, Apple's renewal of the first, the
        // app's reads.
        let (bobOrder, bobToken) = try await harness.order("bob")
        let bobID = Self.id()
        let upload = try await harness.submit(
            try harness.signer.sign(harness.transaction(bobID, token: bobToken)), orderNo: bobOrder, as: "bob")
        #expect(upload.status == 200, "\(upload.text)")
        #expect(try upload.json()["orderStatus"] as? String == "FULFILLED", "\(upload.text)")
        let renewal = try await harness.notify(
            .didRenew, transaction: harness.transaction(Self.id(), original: aliceID, token: aliceToken, reason: .renewal),
            renewal: harness.renewalInfo(original: aliceID))
        #expect(try await harness.outcome(of: renewal, timeout: 60) == .succeeded)
        let current = try await harness.client.get(
            "/api/v1/subscriptions/current", headers: ["Authorization": "Bearer \(harness.ingress.userToken("alice"))"])
        #expect(current.status == 200, "\(current.text)")

        // A new instance of this release starts on it too: it needs its migrations, not an equal version.
        let another = try await IngressHarness.launch(harness.ingress.environment)
        defer { another.kill() }
        let port = try #require(another.internalHTTPPort)
        #expect(try await eventually(timeout: 30) { try await TestHTTPClient(port: port).get("/readyz").status == 200 })
    }

    @Test func servicesWaitForTheirMigrationsThenServe() async throws {
        let bundled = try Migrator.bundled()
        let older = Array(bundled.dropLast())
        let pipeline = try await PipelineHarness.make(migrations: older)
        var environment = pipeline.serviceEnvironment
        environment.merge([
            "INGRESS_HTTP_PORT": "0", "INTERNAL_HTTP_PORT": "0",
            "CURSOR_SIGNING_KEY": Data(SecureRandom.bytes(32)).base64EncodedString(),
            "USER_TOKEN_HS256_SECRET": Base64URL.encode(SecureRandom.bytes(32)),
        ]) { _, new in new }
        let ingress = try ServiceProcess(executable: "ingress", name: "ingress-waiting", environment: environment)
        defer { ingress.kill() }
        let worker = try pipeline.startWorker("worker-waiting")
        defer { worker.kill() }
        #expect(await ingress.waitForOutput("probes listening", timeout: 60), "\(ingress.output.suffix(2000))")
        #expect(await worker.waitForOutput("probes listening", timeout: 60), "\(worker.output.suffix(2000))")
        let probes = TestHTTPClient(port: try #require(ingress.internalHTTPPort))
        let workerProbes = TestHTTPClient(port: try #require(worker.httpPort))

        let waiting = "waiting for \(bundled.last!.version), at \(older.last!.version)"
        #expect(
            try await eventually(timeout: 30) {
                let ready = try await probes.get("/readyz")
                let schema = try ready.json()["schema"] as? String
                return ready.status == 503 && schema == waiting
            })
        #expect(try await probes.get("/healthz").status == 200)
        let workerReady = try await workerProbes.get("/readyz")
        #expect(workerReady.status == 503)
        #expect(try workerReady.json()["schema"] as? String == waiting, "\(workerReady.text)")
        #expect(try await workerProbes.get("/healthz").status == 200)
        // Still waiting, not migrating: the schema is as it was.
        let pool = PostgresPool(
            configuration: TestEnvironment.poolConfiguration(url: pipeline.databaseURL, maximumConnections: 2),
            logger: Logger(label: "e2e", level: .warning))
        try await withResource({ pool }, cleanUp: { await $0.shutdown() }) { pool in
            let state = try await Migrator(pool: pool, logger: Logger(label: "e2e", level: .warning)).state(of: bundled)
            #expect(state.missing == [bundled.last!.version])
            #expect(!ingress.output.contains("ingress listening"))

            // The set-up step runs: both notice within their next look and serve.
            try await Migrator(pool: pool, logger: Logger(label: "e2e", level: .warning)).migrate(bundled)
        }
        #expect(await ingress.waitForOutput("ingress listening", timeout: 60), "\(ingress.output.suffix(2000))")
        #expect(try await eventually(timeout: 30) { try await probes.get("/readyz").status == 200 })
        #expect(try await eventually(timeout: 90) { try await workerProbes.get("/readyz").status == 200 })
        #expect(try await probes.get("/readyz").json()["schema"] as? String == "ok")
    }
}
