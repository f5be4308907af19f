import Foundation
import Postgres
import Storage
import Testing

/// Migration 0032: the rows already there get their facts from their renewal infos and are due at
/// once, so readers apply the rule (and the clock job recomputes them) from the migration on.
@Suite struct SubscriptionClockMigrationTests {
    @Test func existingRowsGetTheirFactsAndAreDueAtOnce() async throws {
        try await Fixture.acrossMigration(
            32,
            seed: """
                INSERT INTO app_user (user_id) VALUES ('u');
                -- a: failed a day before its end (in retry, grace given), stored ACTIVE, ended an hour ago.
                -- b: auto-renew off, stored ACTIVE, ended an hour ago. c: revoked. d: retry info older
                -- than the current period (a renewal came since). e: no renewal info, still paid.
                INSERT INTO apple_transaction (environment, transaction_id, original_transaction_id, user_id, product_id,
                                               purchase_date, expires_date, ownership_type, signed_date, payload_hash)
                VALUES ('Sandbox', 'a', 'a', 'u', 'p', now() - interval '30 days', now() - interval '1 hour', 'PURCHASED', now() - interval '30 days', 'h'),
                       ('Sandbox', 'b', 'b', 'u', 'p', now() - interval '30 days', now() - interval '1 hour', 'PURCHASED', now() - interval '30 days', 'h'),
                       ('Sandbox', 'c', 'c', 'u', 'p', now() - interval '30 days', now() + interval '1 day', 'PURCHASED', now() - interval '30 days', 'h'),
                       ('Sandbox', 'd', 'd', 'u', 'p', now() - interval '2 days', now() - interval '1 hour', 'PURCHASED', now() - interval '2 days', 'h'),
                       ('Sandbox', 'e', 'e', 'u', 'p', now() - interval '2 days', now() + interval '1 day', 'PURCHASED', now() - interval '2 days', 'h');
                INSERT INTO apple_renewal_info (environment, original_transaction_id, product_id, auto_renew_enabled,
                                                is_in_billing_retry, grace_period_expires_at, signed_date)
                VALUES ('Sandbox', 'a', 'p', true, true, now() + interval '5 days', now() - interval '1 day'),
                       ('Sandbox', 'b', 'p', false, false, NULL, now() - interval '3 days'),
                       ('Sandbox', 'c', 'p', true, true, now() + interval '5 days', now() - interval '1 day'),
                       ('Sandbox', 'd', 'p', true, true, NULL, now() - interval '3 days');
                INSERT INTO user_subscription (environment, original_transaction_id, user_id, active_product_id, status,
                                               auto_renew_enabled, expires_at, last_transaction_id, last_signed_date)
                VALUES ('Sandbox', 'a', 'u', 'p', 'ACTIVE', true, now() - interval '1 hour', 'a', now()),
                       ('Sandbox', 'b', 'u', 'p', 'ACTIVE', false, now() - interval '1 hour', 'b', now()),
                       ('Sandbox', 'c', 'u', 'p', 'REVOKED', true, now() + interval '1 day', 'c', now()),
                       ('Sandbox', 'd', 'u', 'p', 'ACTIVE', true, now() - interval '1 hour', 'd', now()),
                       ('Sandbox', 'e', 'u', 'p', 'ACTIVE', true, now() + interval '1 day', 'e', now());
                """
        ) { pool in
            var rows: [String: (retry: Bool, grace: Bool, due: Bool, now: String)] = [:]
            for row in try await pool.query(
                """
                SELECT original_transaction_id AS o, in_billing_retry, grace_expires_at IS NOT NULL AS grace,
                       next_change_at IS NOT NULL AS due,
                       subscription_status_at(status, next_change_at, expires_at, grace_expires_at, in_billing_retry,
                                              auto_renew_enabled, commitment_ends_at, now()) AS now_status
                  FROM user_subscription
                """)
            {
                rows[try row.decode("o")] = (
                    try row.decode("in_billing_retry"), try row.decode("grace"), try row.decode("due"), try row.decode("now_status")
                )
            }
            #expect(rows["a"].map { [$0.retry, $0.grace, $0.due] } == [true, true, true])
            #expect(rows["a"]?.now == "GRACE", "the failure came before the end: grace from the expiry")
            #expect(rows["b"]?.now == "EXPIRED", "auto-renew off: ended at the expiry")
            #expect(rows["c"].map { [$0.retry, $0.grace, $0.due] } == [false, false, false])
            #expect(rows["c"]?.now == "REVOKED")
            #expect(rows["d"]?.retry == false, "a failure older than the current period")
            #expect(rows["d"]?.now == "EXPIRED")
            #expect(rows["e"]?.now == "ACTIVE")
        }
    }

    /// Migration 0048: a row whose current charge is inside a 12-month commitment gets the
    /// commitment's end and is due at once; the commitment's last charge, a plan billed up front
    /// and a revoked charge get nothing. The status rule then keeps a failed charge inside the
    /// commitment in billing retry, though auto-renew is off; the previous release's 7-argument form
    /// still answers (with its own rule) during a rolling upgrade.
    @Test func commitmentRowsGetTheirCommitmentsEnd() async throws {
        try await Fixture.acrossMigration(
            48,
            seed: """
                INSERT INTO app_user (user_id) VALUES ('u');
                -- m: charge 3 of 12, ended an hour ago, auto-renew off, Apple retrying. l: charge 12
                -- of 12. u: billed up front. r: charge 3 of 12, refunded.
                INSERT INTO apple_transaction (environment, transaction_id, original_transaction_id, user_id, product_id,
                                               purchase_date, expires_date, ownership_type, signed_date, payload_hash,
                                               billing_plan_type, commitment_billing_period, commitment_total_periods,
                                               commitment_expires_date, revocation_date)
                VALUES ('Sandbox', 'm', 'm', 'u', 'p', now() - interval '30 days', now() - interval '1 hour', 'PURCHASED', now() - interval '30 days', 'h',
                        'MONTHLY', 3, 12, now() + interval '270 days', NULL),
                       ('Sandbox', 'l', 'l', 'u', 'p', now() - interval '30 days', now() + interval '1 day', 'PURCHASED', now() - interval '30 days', 'h',
                        'MONTHLY', 12, 12, now() + interval '1 day', NULL),
                       ('Sandbox', 'u', 'u', 'u', 'p', now() - interval '30 days', now() + interval '300 days', 'PURCHASED', now() - interval '30 days', 'h',
                        'BILLED_UPFRONT', NULL, NULL, NULL, NULL),
                       ('Sandbox', 'r', 'r', 'u', 'p', now() - interval '30 days', now() + interval '1 day', 'PURCHASED', now() - interval '30 days', 'h',
                        'MONTHLY', 3, 12, now() + interval '270 days', now() - interval '1 day');
                INSERT INTO user_subscription (environment, original_transaction_id, user_id, active_product_id, status,
                                               auto_renew_enabled, expires_at, last_transaction_id, last_signed_date, in_billing_retry)
                VALUES ('Sandbox', 'm', 'u', 'p', 'ACTIVE', false, now() - interval '1 hour', 'm', now(), true),
                       ('Sandbox', 'l', 'u', 'p', 'ACTIVE', false, now() + interval '1 day', 'l', now(), false),
                       ('Sandbox', 'u', 'u', 'p', 'ACTIVE', false, now() + interval '300 days', 'u', now(), false),
                       ('Sandbox', 'r', 'u', 'p', 'REVOKED', false, now() + interval '1 day', 'r', now(), false);
                """
        ) { pool in
            var rows: [String: (committed: Bool, due: Bool, now: String, previous: String)] = [:]
            for row in try await pool.query(
                """
                SELECT original_transaction_id AS o, commitment_ends_at IS NOT NULL AS committed, next_change_at IS NOT NULL AS due,
                       subscription_status_at(status, next_change_at, expires_at, grace_expires_at, in_billing_retry,
                                              auto_renew_enabled, commitment_ends_at, now()) AS now_status,
                       subscription_status_at(status, next_change_at, expires_at, grace_expires_at, in_billing_retry,
                                              auto_renew_enabled, now()) AS previous_release
                  FROM user_subscription
                """)
            {
                rows[try row.decode("o")] = (
                    try row.decode("committed"), try row.decode("due"), try row.decode("now_status"),
                    try row.decode("previous_release")
                )
            }
            #expect(rows["m"].map { [$0.committed, $0.due] } == [true, true])
            #expect(rows["m"]?.now == "BILLING_RETRY", "inside the commitment: Apple's retries, not the end")
            #expect(rows["m"]?.previous == "EXPIRED", "the previous release's form, unchanged")
            #expect(rows["l"].map { [$0.committed, $0.due] } == [false, false])
            #expect(rows["u"]?.committed == false)
            #expect(rows["r"]?.committed == false && rows["r"]?.now == "REVOKED")
        }
    }
}
