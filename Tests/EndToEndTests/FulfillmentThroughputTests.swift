import AppStore
import AppStoreTestSupport
import Foundation
import FulfillmentApp
import IngressApp
import Kafka
import Pipeline
import Postgres
import ServiceRuntime
import Storage
import TestSupport
import Testing

/// Throughput of the worker pool on real facts (prints figures; asserts only correctness): a backlog
/// of renewals stored and published as the ingress would, then drained by 1 and by 2 workers.
///
/// A benchmark, not part of the test suite: it runs only from Tests/Benchmarks/fulfillment-throughput.sh
/// (which sets SUBS_RUN_BENCHMARKS=1) and is reported as skipped otherwise.
@Suite(
    .serialized, .timeLimit(.minutes(10)),
    .enabled(if: ProcessInfo.processInfo.environment["SUBS_RUN_BENCHMARKS"] == "1", "benchmark: run fulfillment-throughput.sh"))
struct FulfillmentThroughputTests {
    /// The event topic's partitions (`BENCH_PARTITIONS`): the local deployment's 12 unless asked.
    static let partitions = Int(ProcessInfo.processInfo.environment["BENCH_PARTITIONS"] ?? "") ?? 12
    /// `BENCH_DATABASE`: drain into this existing database (the scale run's) instead of an empty one.
    static let existingDatabase = ProcessInfo.processInfo.environment["BENCH_DATABASE"]
    /// `BENCH_OUTBOUND_EVENTS`: the workers' `OUTBOUND_EVENTS_ENABLED` (default true, the
    /// deployment's), so outbound-events-throughput.sh compares the same drain with them off and on.
    static let outboundEvents = ProcessInfo.processInfo.environment["BENCH_OUTBOUND_EVENTS"] ?? "true"

    @Test(arguments: [1, 2]) func drainsABacklogOfRenewals(workers: Int) async throws {
        let total = 3_000
        let chains = 600
        let harness = try await PipelineHarness.make(partitions: Self.partitions, existingDatabase: Self.existingDatabase)
        // Ids of this drain only, so that it can run on a database holding other data (a scale
        // run's, or an earlier drain's): every count below is scoped to them.
        // Six digits: on a database that earlier drains wrote to, two digits collided within a day.
        let tag = String(Int.random(in: 100_000...999_999))
        let configuration = try harness.configuration
        // The driver's own statements are told apart from the workers' in the scale run's plans.
        var driver = configuration.postgres
        driver.applicationName = "bench-driver"
        let pool = PostgresPool(configuration: driver, logger: harness.logger)
        let producer = try KafkaProducer(configuration: configuration.kafka, logger: harness.logger)
        let producing = Task { try await producer.run() }
        defer { producing.cancel() }
        try await Bootstrap.prepare(configuration: configuration, pool: pool, logger: harness.logger)
        // The backlog is stored through a pool of its own, closed before the drain: its backends
        // then report their row counts, which are not the drain's.
        let intakePool = PostgresPool(configuration: driver, logger: harness.logger)
        let store = EventStore(pool: intakePool, topic: configuration.eventTopic)
        let intake = NotificationIntake(
            store: store, publisher: EventPublisher(producer: producer, outbox: store, logger: harness.logger))
        try await pool.query(
            """
            INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount)
            VALUES (\(IngressHarness.bundleID), 'com.example.starter.monthly', '21000000', 'starter', 2, 'P1M', 1000)
            ON CONFLICT DO NOTHING
            """)
        var tokens: [UUID] = []
        for chain in 0..<chains {
            tokens.append(UUID())
            try await pool.query("INSERT INTO app_user (user_id) VALUES (\("bench\(tag)-\(chain)"))")
            try await pool.query(
                "INSERT INTO user_account_token (user_id, app_account_token) VALUES (\("bench\(tag)-\(chain)"), \(tokens[chain]))")
        }
        let start = Date() - 86_400
        let events = try (0..<total).map { i -> NewNotificationEvent in
            let chain = i % chains
            let period = i / chains
            let original = tag + String(format: "%06d", chain)
            var transaction = TestPayloads.transaction(
                bundleId: IngressHarness.bundleID, environment: .sandbox, productId: "com.example.starter.monthly",
                transactionId: period == 0 ? original : original + String(format: "%03d", period),
                originalTransactionId: original, purchaseDate: start + Double(period) * 30 * 86_400,
                appAccountToken: tokens[chain])
            transaction.transactionReason = period == 0 ? .purchase : .renewal
            let renewal = TestPayloads.renewalInfo(environment: .sandbox, productId: "com.example.starter.monthly", originalTransactionId: original)
            return try harness.storedNotification(
                type: period == 0 ? .subscribed : .didRenew, subtype: period == 0 ? .initialBuy : nil,
                transaction: transaction, renewal: renewal)
        }
        let firstEvent = try await pool.query("SELECT coalesce(max(id), 0) AS id FROM inbound_event_key").first!.decode(
            "id", as: Int64.self)
        for batch in stride(from: 0, to: total, by: 100) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in batch..<min(batch + 100, total) {
                    group.addTask { try await intake.accept(events[i], awaitPublish: true) }
                }
                try await group.waitForAll()
            }
        }

        await intakePool.shutdown()
        _ = try await eventually(timeout: 10, every: .milliseconds(100)) {
            try await pool.query(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).first!.decode("n", as: Int.self) < pool.statistics.open
        }
        let commitsBefore = try await Self.commits(pool)
        let walBefore = try await Self.walPosition(pool)
        let rowsBefore = try await Self.rowChanges(pool)
        // The local broker shares the cores: what the drain (and the relay's sends) cost it.
        let broker = (try? String(contentsOf: ServiceProcess.localState.appendingPathComponent("run/tansu.pid"), encoding: .utf8))
            .flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        let brokerCPUBefore = broker.map { Self.cpuSeconds(pid: $0) } ?? 0
        var processes: [ServiceProcess] = []
        for index in 0..<workers {
            processes.append(
                try ServiceProcess(
                    executable: "fulfillment", name: "bench-\(index)",
                    environment: harness.serviceEnvironment.merging([
                        // The backlog is older than the test's stuck threshold: keep the sweeper from
                        // re-publishing it while it drains, as the default threshold would.
                        "WORKER_ID": "bench-\(index)", "LOG_LEVEL": "warning", "EVENT_STUCK_AFTER_SECONDS": "600",
                        "OUTBOUND_EVENTS_ENABLED": Self.outboundEvents,
                    ]) {
                        _, new in new
                    }))
        }
        defer { for process in processes { process.kill() } }
        func count(_ sql: String) async throws -> Int {
            try await pool.query(PostgresQuery(unsafeSQL: sql)).first!.decode(0, as: Int.self)
        }
        let drained = try await eventually(timeout: 300, every: .milliseconds(500)) {
            try await count(
                "SELECT count(*) FROM inbound_event WHERE id > \(firstEvent) AND kind = 'notification' AND process_status = 'SUCCEEDED'")
                == total
        }
        #expect(drained, "\(processes.map { $0.output.suffix(2000) })")
        // With outbound events on, the drain ends when the relay has published them too.
        let outbound = "SELECT count(*) FROM outbound_event WHERE user_id LIKE 'bench\(tag)-%'"
        if Self.outboundEvents == "true" {
            let published = try await eventually(timeout: 120, every: .milliseconds(200)) {
                try await count(outbound + " AND published_at IS NULL") == 0
            }
            #expect(published, "every outbound event published")
        }
        let outboundWritten = try await count(outbound)
        // Each renewal: its entitlement event, its order's and its grant's.
        #expect(outboundWritten == (Self.outboundEvents == "true" ? 3 * total : 0))
        let outboundSeconds =
            outboundWritten == 0
            ? 0
            : try await pool.query(
                PostgresQuery(
                    unsafeSQL:
                        "SELECT extract(epoch FROM max(published_at) - min(created_at))::float8 AS s FROM outbound_event WHERE user_id LIKE 'bench\(tag)-%'"
                )
            ).first!.decode("s", as: Double.self)
        let seconds = try await pool.query(
            "SELECT extract(epoch FROM max(processed_at) - min(processed_at))::float8 AS s FROM processed_event WHERE event_kind = 'notification' AND event_id > \(firstEvent)"
        ).first!.decode("s", as: Double.self)
        let cpu = processes.map { Self.cpuSeconds(pid: $0.pid) }.reduce(0, +)
        // The backends serving this database (the workers' pools): what the events cost PostgreSQL.
        let backends = try await pool.query(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).map { try $0.decode("pid", as: Int32.self) }
        let databaseCPU = backends.map { Self.cpuSeconds(pid: $0) }.reduce(0, +)
        let brokerCPU = (broker.map { Self.cpuSeconds(pid: $0) } ?? 0) - brokerCPUBefore
        let rss = processes.map { Self.peakRSSMiB(pid: $0.pid) }.max() ?? 0
        for process in processes { process.kill() }
        // Backends report their counters when they end: wait for the workers' backends to end.
        _ = try await eventually(timeout: 10, every: .milliseconds(100)) {
            try await count(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
                < pool.statistics.open
        }
        let commits = try await Self.commits(pool) - commitsBefore
        let wal = try await Self.walBytes(since: walBefore, pool)
        let rows = try await Self.rowChanges(pool).merging(rowsBefore.mapValues { -$0 }, uniquingKeysWith: +).filter { $0.value > 0 }
        print(
            "fulfillment_throughput workers=\(workers) partitions=\(Self.partitions) events=\(total) seconds=\(String(format: "%.2f", seconds))"
                + " events_per_second=\(Int(Double(total) / seconds))"
                + " worker_cpu_ms_per_event=\(String(format: "%.3f", cpu * 1000 / Double(total)))"
                + " postgres_cpu_ms_per_event=\(String(format: "%.3f", databaseCPU * 1000 / Double(total)))"
                + " broker_cpu_ms_per_event=\(String(format: "%.3f", brokerCPU * 1000 / Double(total)))"
                + " postgres_commits_per_event=\(String(format: "%.2f", Double(commits) / Double(total)))"
                + " worker_peak_rss_mib=\(String(format: "%.1f", rss))"
                + " wal_bytes_per_event=\(wal / total)"
                + " rows_written_per_event=\(String(format: "%.2f", Double(rows.values.reduce(0, +)) / Double(total)))"
                + " outbound_events=\(Self.outboundEvents == "true" ? "on" : "off") outbound_written=\(outboundWritten)"
                + " outbound_first_to_last_published_seconds=\(String(format: "%.2f", outboundSeconds))")
        print(
            "fulfillment_rows_per_event workers=\(workers) "
                + rows.sorted { $0.key < $1.key }.map { "\($0.key)=\(String(format: "%.2f", Double($0.value) / Double(total)))" }
                .joined(separator: " "))
        #expect(try await count("SELECT count(*) FROM credit_grant WHERE user_id LIKE 'bench\(tag)-%'") == total)
        // This drain's chains: others on a scale run's database were projected hours earlier.
        let mismatches = try await ChainReplay.mismatches(pool: pool, now: Date(), environment: "Sandbox")
        #expect(mismatches.filter { $0.chain.hasPrefix("Sandbox:" + tag) }.isEmpty)
        if workers == 2 {
            // The ceiling in the same run, on the same tables, with the workers gone.
            // Its backends' CPU is sampled while it runs (they exit with it), to compare what one of
            // its transactions costs PostgreSQL with what one event costs it.
            let url = harness.databaseURL
            let ceilingWALBefore = try await Self.walPosition(pool)
            let bench = Task.detached { try Self.pgbenchFulfillmentShaped(url: url, chains: chains, prefix: tag) }
            var backendCPU: [Int32: Double] = [:]
            while true {
                let pids = try await pool.query(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'pgbench'"
                ).map { try $0.decode("pid", as: Int32.self) }
                for pid in pids { backendCPU[pid] = max(backendCPU[pid] ?? 0, Self.cpuSeconds(pid: pid)) }
                if pids.isEmpty, !backendCPU.isEmpty { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            let tps = try await bench.value
            let ceilingWAL = try await Self.walBytes(since: ceilingWALBefore, pool)
            print(
                "fulfillment_pgbench_ceiling clients=8 tps=\(Int(tps))"
                    + " wal_bytes_per_transaction=\(ceilingWAL / Self.pgbenchTransactions)"
                    + " postgres_cpu_ms_per_transaction=\(String(format: "%.3f", backendCPU.values.reduce(0, +) * 1000 / Double(Self.pgbenchTransactions)))"
            )
        }
        await pool.shutdown()
        await producer.shutdown()
    }

    /// Webhook to entitlement: Apple's notifications POSTed to a real ingress at a steady rate
    /// (`BENCH_OFFERED_RATE`, default 500/s, for `BENCH_SECONDS`, default 10), each a new user's
    /// purchase; for one in ten, the time from the ingress's 200 until `GET
    /// /api/v1/subscriptions/current` shows the subscription ACTIVE.
    @Test(.enabled(if: existingDatabase == nil, "an empty database's figure only"))
    func latencyFromWebhookToEntitlementAtASteadyRate() async throws {
        let environment = ProcessInfo.processInfo.environment
        let rate = Int(environment["BENCH_OFFERED_RATE"] ?? "") ?? 500
        let total = rate * (Int(environment["BENCH_SECONDS"] ?? "") ?? 10)
        let sampleEvery = 10
        let harness = try await WorkerHarness.start(
            workers: 2, partitions: Self.partitions,
            extra: [
                "INGRESS_NOTIFICATION_RATE_PER_SECOND": "1000000", "INGRESS_NOTIFICATION_RATE_BURST": "1000000",
                // The load generator's 64 connections plus the harness's own, all from loopback.
                "INGRESS_MAX_CONNECTIONS_PER_IP": "1024",
                // The deployment's sweeper, not the test harness's (5 s): under a backlog that one
                // re-published every waiting event each half second, and the duplicates cost the
                // workers more than the events themselves.
                "EVENT_STUCK_AFTER_SECONDS": "60", "EVENT_SWEEP_INTERVAL_MS": "1000",
            ])
        defer { harness.stop() }
        let tokens = (0..<total).map { _ in UUID() }
        try await harness.pool.query(
            """
            WITH users AS (
                INSERT INTO app_user (user_id) SELECT 'user-' || i FROM generate_series(0, \(total - 1)) AS i RETURNING user_id
            )
            INSERT INTO user_account_token (user_id, app_account_token)
            SELECT 'user-' || (t.n - 1), t.token FROM unnest(\(PostgresArray(tokens))::uuid[]) WITH ORDINALITY AS t(token, n)
            """)
        let bodies = try (0..<total).map { i -> Data in
            let id = "6" + String(format: "%09d", i)
            let jws = try harness.signer.signNotification(
                type: .subscribed, subtype: .initialBuy, bundleId: IngressHarness.bundleID, environment: .sandbox,
                transaction: harness.transaction(id, token: tokens[i]), renewalInfo: harness.renewalInfo(original: id))
            return try JSONSerialization.data(withJSONObject: ["signedPayload": jws])
        }
        let authorizations = (0..<total).map { i in
            i % sampleEvery == 0 ? "Bearer \(harness.ingress.userToken("user-\(i)"))" : ""
        }
        let path = "/api/v1/iap/apple/notifications/sandbox"
        let cpuBefore = try await Self.latencyRunCPU(harness)
        let interval = Duration.seconds(1) / rate
        // The driver is libcurl on plain threads, not URLSession: its own CPU per request is what
        // it takes from the two cores it shares with the system under measure.
        let generator = LoadGenerator(baseURL: harness.client.baseURL.absoluteString, connections: 64)
        let outcomes = Locked<[(status: Int, latency: Duration?)]>([])
        let lastAnswer = Locked(ContinuousClock.now)
        let polls = Locked(0)
        // Samples answered 200 and not yet seen ACTIVE: one database query every 5 ms for all of
        // them tells when to look through the REST API, so the API is read about once per sample
        // (polling every sample through the API cost the ingress and PostgreSQL more than the
        // events themselves). A sample the database never shows is polled through the API after 2 s.
        let waiting = Locked<[Int: ContinuousClock.Instant]>([:])
        let finished = Locked<Set<Int>>([])
        let payloads = bodies.map { [UInt8]($0) }
        /// Asks the API whether sample `i` is ACTIVE; records it once; when not, asks again a tenth
        /// of the wait so far later (the figure is then at most ~10% late).
        @Sendable func confirm(_ i: Int, since: ContinuousClock.Instant, _ connection: CurlConnection) -> ContinuousClock.Instant? {
            guard !finished.value.contains(i) else { return nil }
            polls.withLock { $0 += 1 }
            let current = try? connection.request(
                "GET", "/api/v1/subscriptions/current", headers: ["Authorization: \(authorizations[i])"])
            let answered = ContinuousClock.now
            let active = current.map { $0.status == 200 && $0.text.contains("\"ACTIVE\"") } ?? false
            if current == nil || active {
                guard finished.withLock({ $0.insert(i).inserted }) else { return nil }
                outcomes.withLock { $0.append(active ? (200, answered - since) : (0, nil)) }
                lastAnswer.withLock { $0 = max($0, answered) }
                return nil
            }
            return answered + .milliseconds(5) + (answered - since) / 10
        }
        let started = ContinuousClock.now + .milliseconds(200)
        for i in 0..<total {
            let accepted = Locked<ContinuousClock.Instant?>(nil)
            // Open loop: the next request leaves on schedule whatever the previous ones do.
            generator.schedule(at: started + interval * i) { connection in
                if let since = accepted.value { return confirm(i, since: since, connection) }
                let response = try? connection.request(
                    "POST", path, headers: ["Content-Type: application/json"], body: payloads[i])
                let status = response?.status ?? 0
                let now = ContinuousClock.now
                guard status == 200, i % sampleEvery == 0 else {
                    outcomes.withLock { $0.append((status, nil)) }
                    lastAnswer.withLock { $0 = max($0, now) }
                    return nil
                }
                accepted.withLock { $0 = now }
                waiting.withLock { $0[i] = now }
                return now + .seconds(2)
            }
        }
        let watching = Task {
            while !Task.isCancelled {
                let samples = waiting.value
                if !samples.isEmpty {
                    let rows = try await harness.pool.query(
                        """
                        SELECT user_id FROM user_subscription
                         WHERE user_id = ANY(\(PostgresArray(samples.keys.map { "user-\($0)" }))::text[]) AND status = 'ACTIVE'
                        """)
                    for row in rows {
                        let i = Int(try row.decode("user_id", as: String.self).dropFirst("user-".count))!
                        guard let since = waiting.withLock({ $0.removeValue(forKey: i) }) else { continue }
                        generator.schedule(at: .now) { confirm(i, since: since, $0) }
                    }
                }
                try await Task.sleep(for: .milliseconds(5))
            }
        }
        try await generator.run()
        watching.cancel()
        let results = outcomes.value
        let sendSeconds = Self.seconds(lastAnswer.value - started)
        let drained = try await eventually(timeout: 300, every: .milliseconds(500)) {
            try await harness.count("SELECT count(*) FROM inbound_event WHERE kind = 'notification' AND process_status = 'SUCCEEDED'") == total
        }
        #expect(drained)
        let cpuAfter = try await Self.latencyRunCPU(harness)
        let cpuPerEvent = zip(cpuBefore, cpuAfter).map { before, after in
            "\(after.name)=\(String(format: "%.2f", (after.seconds - before.seconds) * 1000 / Double(total)))"
        }
        let latencies = results.compactMap(\.latency).map(Self.seconds).sorted()
        let rejected = results.filter { $0.status != 200 }.count
        #expect(rejected == 0, "\(rejected) notifications were not answered 200")
        func percentile(_ p: Double) -> String {
            guard !latencies.isEmpty else { return "n/a" }
            return String(format: "%.0f", latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))] * 1000)
        }
        let rss = harness.workers.map { Self.peakRSSMiB(pid: $0.pid) }.max() ?? 0
        // The same path seen by the database, free of the test client's own queueing: from the
        // row the ingress committed before its 200 to the commit that made the entitlement readable.
        let stored = try await harness.pool.query(
            """
            SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM processed_at - received_at))::float8 AS p50,
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM processed_at - received_at))::float8 AS p99
              FROM inbound_event WHERE kind = 'notification'
            """
        ).first!
        print(
            "fulfillment_latency offered_per_second=\(rate) partitions=\(Self.partitions) events=\(total) samples=\(latencies.count)"
                + " webhook_to_entitlement_ms_p50=\(percentile(0.50)) p99=\(percentile(0.99)) max=\(percentile(1.0))"
                + " stored_to_committed_ms_p50=\(Int(try stored.decode("p50", as: Double.self) * 1000))"
                + " p99=\(Int(try stored.decode("p99", as: Double.self) * 1000))"
                + " polls=\(polls.value) all_answered_within_s=\(String(format: "%.1f", sendSeconds)) worker_peak_rss_mib=\(String(format: "%.1f", rss))"
        )
        // Where the two cores went: the test driver (its requests and its watch) competes with the
        // system it measures.
        print("fulfillment_latency_cpu_ms_per_event \(cpuPerEvent.joined(separator: " "))")
        #expect(try await harness.count("SELECT count(*) FROM credit_grant") == total)
    }

    /// Transactions of one pgbench ceiling run (8 clients, an equal share each).
    static let pgbenchTransactions = 16_000

    /// PostgreSQL's fulfillment-shaped transaction (insert the transaction, lock and update the
    /// subscription, insert the grant as a lot, update the balance and book its ledger entry: a
    /// balance is the sum of its ledger entries and of its lots, so a renewal cannot write less)
    /// with pgbench, 8 clients, on the
    /// chains a drain left behind (their ids start with `prefix`, their users are `bench<prefix>-N`);
    /// its transactions per second.
    static func pgbenchFulfillmentShaped(url: String, chains: Int, prefix: String) throws -> Double {
        let script = FileManager.default.temporaryDirectory.appendingPathComponent(TestEnvironment.uniqueName("pgbench") + ".sql")
        defer { try? FileManager.default.removeItem(at: script) }
        try """
        \\set chain random(0, \(chains - 1))
        \\set original \(prefix)000000 + :chain
        BEGIN;
        INSERT INTO apple_transaction (environment, transaction_id, original_transaction_id, user_id, product_id,
            purchase_date, expires_date, ownership_type, signed_date, payload_hash)
        VALUES ('Sandbox', gen_random_uuid()::text, :original::text, 'bench\(prefix)-' || :chain, 'com.example.starter.monthly',
            now(), now() + interval '30 days', 'PURCHASED', now(), md5(random()::text));
        SELECT status FROM user_subscription WHERE environment = 'Sandbox' AND original_transaction_id = :original::text FOR UPDATE;
        UPDATE user_subscription SET expires_at = now() + interval '30 days', version = version + 1, updated_at = now()
         WHERE environment = 'Sandbox' AND original_transaction_id = :original::text;
        WITH lot AS (
            INSERT INTO credit_grant (grant_key, user_id, pool, amount, remaining, reason, environment, transaction_id,
                original_transaction_id)
            VALUES (gen_random_uuid()::text, 'bench\(prefix)-' || :chain, 'SUBSCRIPTION', 1000000000, 1000000000, 'RENEWAL',
                'Sandbox', gen_random_uuid()::text, :original::text)
            RETURNING grant_key, user_id, pool, amount
        ), account AS (
            UPDATE credit_account SET balance = balance + 1000000000, updated_at = now()
             WHERE user_id = 'bench\(prefix)-' || :chain AND pool = 'SUBSCRIPTION'
            RETURNING balance
        )
        INSERT INTO credit_ledger (user_id, pool, delta, balance_after, entry_type, reference)
        SELECT lot.user_id, lot.pool, lot.amount, account.balance, 'GRANT', lot.grant_key FROM lot, account;
        END;

        """.write(to: script, atomically: true, encoding: .utf8)
        let output = Pipe()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        // A count, not `-T`: pgbench ends a timed run with SIGALRM, which the test process's threads
        // block and a spawned child inherits blocked (a timed run never ends).
        process.arguments = [
            "pgbench", "-n", "-M", "prepared", "-c", "8", "-j", "2", "-t", "\(pgbenchTransactions / 8)", "-f", script.path, url,
        ]
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("tps = ") }),
            let tps = Double(line.dropFirst("tps = ".count).prefix { $0 != " " })
        else { throw MissingServiceError(variable: "pgbench's tps (output: \(text.suffix(2000)))") }
        return tps
    }

    /// CPU seconds so far of each part of a latency run: the test driver (this process), the
    /// ingress, the workers, and the PostgreSQL backends serving this database (the broker's
    /// share is the rest of the machine's).
    static func latencyRunCPU(_ harness: WorkerHarness) async throws -> [(name: String, seconds: Double)] {
        let backends = try await harness.pool.query(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).map { try $0.decode("pid", as: Int32.self) }
        return [
            ("driver", cpuSeconds(pid: getpid())), ("ingress", cpuSeconds(pid: harness.ingress.process.pid)),
            ("workers", harness.workers.map { cpuSeconds(pid: $0.pid) }.reduce(0, +)),
            ("postgres", backends.map { cpuSeconds(pid: $0) }.reduce(0, +)),
        ]
    }

    /// Transactions committed in this database so far (claims, applications, notifications, sweeps).
    static func commits(_ pool: PostgresPool) async throws -> Int {
        try await pool.query(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).first!.decode("xact_commit", as: Int.self)
    }

    /// The server's WAL insert position (the cluster's: on a quiet machine, this run's writes).
    static func walPosition(_ pool: PostgresPool) async throws -> String {
        try await pool.query("SELECT pg_current_wal_lsn()::text AS lsn").first!.decode("lsn", as: String.self)
    }

    static func walBytes(since position: String, _ pool: PostgresPool) async throws -> Int {
        try await pool.query("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), \(position)::pg_lsn)::bigint AS bytes")
            .first!.decode("bytes", as: Int.self)
    }

    /// Rows inserted, updated or deleted per table so far (backends report them when their
    /// transactions end; read after the writers' backends ended).
    static func rowChanges(_ pool: PostgresPool) async throws -> [String: Int] {
        var rows: [String: Int] = [:]
        for row in try await pool.query(
            "SELECT relname::text AS t, (n_tup_ins + n_tup_upd + n_tup_del)::bigint AS n FROM pg_stat_user_tables")
        {
            rows[try row.decode("t"), default: 0] += try row.decode("n", as: Int.self)
        }
        return rows
    }

    static func seconds(_ duration: Duration) -> Double {
        duration.inSeconds
    }

    /// Peak resident memory of a process (`VmHWM` in `/proc/<pid>/status`), MiB.
    static func peakRSSMiB(pid: Int32) -> Double {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
            let kib = Double(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        else { return 0 }
        return kib / 1024
    }

    /// User plus system CPU time of a process so far (Linux `/proc/<pid>/stat`, clock ticks of 1/100 s).
    static func cpuSeconds(pid: Int32) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command: state is field 3, utime field 14, stime field 15.
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / 100
    }
}
