import Foundation
import FulfillmentApp
import Postgres
import TestSupport
import Testing

/// The clock job's rate (prints figures, asserts none): 100,000 subscriptions due at once, half
/// into billing retry and half expired, advanced by two runners as two workers would, each with
/// its history and events. Run by Tests/Benchmarks/subscription-clock.sh (SUBS_RUN_BENCHMARKS=1);
/// skipped otherwise.
@Suite(
    .serialized, .timeLimit(.minutes(10)),
    .enabled(if: ProcessInfo.processInfo.environment["SUBS_RUN_BENCHMARKS"] == "1", "benchmark: run subscription-clock.sh"))
struct SubscriptionClockBenchmarkTests {
    @Test func advancesAHundredThousandDueSubscriptions() async throws {
        let rows = Int(ProcessInfo.processInfo.environment["BENCH_CLOCK_ROWS"] ?? "") ?? 100_000
        let batch = Int(ProcessInfo.processInfo.environment["BENCH_CLOCK_BATCH"] ?? "") ?? 500
        try await withTestDatabase("clockbench") { database in
            let pool = database.pool
            try await pool.query(
                """
                INSERT INTO payment_product (app_key, product_id, subscription_group_id, plan_code, plan_level, duration, credits_amount)
                VALUES ('com.example.subscriptions', 'plan', 'group', 'pro', 1, 'P1M', 10)
                """)
            try await pool.query(
                """
                INSERT INTO app_user (user_id) SELECT 'u' || i FROM generate_series(1, \(rows)) AS i
                """)
            try await pool.query(
                """
                INSERT INTO user_subscription (environment, original_transaction_id, user_id, active_product_id, status,
                    auto_renew_enabled, expires_at, last_transaction_id, last_signed_date, in_billing_retry, next_change_at)
                SELECT 'Production', 'c' || i, 'u' || i, 'plan', 'ACTIVE', true, now() - interval '1 minute', 'c' || i, now(),
                       i % 2 = 0, now() - interval '1 minute'
                  FROM generate_series(1, \(rows)) AS i
                """)
            try await pool.query("ANALYZE user_subscription")
            let now = Date()
            let start = ContinuousClock.now
            async let first = SubscriptionClock(pool: pool, batchSize: batch).advance(now: now)
            async let second = SubscriptionClock(pool: pool, batchSize: batch).advance(now: now)
            let advanced = try await first + second
            let elapsed = ContinuousClock.now - start
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let events = try await database.count("SELECT count(*) FROM outbound_event")
            print(
                "subscription_clock rows=\(advanced) runners=2 batch=\(batch) seconds=\(String(format: "%.1f", seconds)) "
                    + "rows_per_second=\(Int(Double(advanced) / seconds)) events=\(events) ceiling_seconds=30")
            #expect(advanced == rows)
        }
    }
}
