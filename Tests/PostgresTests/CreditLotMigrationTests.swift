import Foundation
import Postgres
import Storage
import Testing

/// Migration 0022: every existing grant becomes a lot, and each pool's lots add up to its balance
/// (usage burned the oldest lots first, so the newest keep what is left).
@Suite struct CreditLotMigrationTests {
    @Test func existingGrantsBecomeLotsThatAddUpToTheBalances() async throws {
        try await Fixture.acrossMigration(
            22,
            seed: """
                INSERT INTO app_user (user_id) VALUES ('a'), ('b'), ('c');
                -- a: 100 + 200 + 300 granted, 350 left; the 100 was refunded (40 taken, 60 spent).
                INSERT INTO credit_grant (grant_key, user_id, pool, amount, revoked_amount, unrecoverable_amount, reason)
                VALUES ('a1', 'a', 'SUBSCRIPTION', 100, 40, 60, 'PURCHASE'),
                       ('a2', 'a', 'SUBSCRIPTION', 200, 0, 0, 'RENEWAL'),
                       ('a3', 'a', 'SUBSCRIPTION', 300, 0, 0, 'RENEWAL'),
                       ('a4', 'a', 'PERMANENT', 50, 0, 0, 'ADJUSTMENT'),
                       ('b1', 'b', 'WELCOME', 10, 0, 0, 'WELCOME');
                INSERT INTO credit_account (user_id, pool, balance)
                VALUES ('a', 'SUBSCRIPTION', 350), ('a', 'PERMANENT', 50), ('b', 'WELCOME', 0), ('c', 'PERMANENT', 7);
                """
        ) { pool in

            var lots: [String: [Int64]] = [:]
            for row in try await pool.query("SELECT grant_key, remaining, amount, revoked::int AS revoked FROM credit_grant") {
                lots[try row.decode("grant_key")] = [
                    try row.decode("remaining"), try row.decode("amount"), try row.decode("revoked", as: Int64.self),
                ]
            }
            #expect(lots["a3"] == [300, 300, 0])
            #expect(lots["a2"] == [50, 200, 0])
            #expect(lots["a1"] == [0, 100, 1], "the refunded grant stays revoked")
            #expect(lots["a4"] == [50, 50, 0])
            #expect(lots["b1"] == [0, 10, 0])
            #expect(lots["lots:c:PERMANENT"] == [7, 7, 0], "a balance no grant explains becomes a lot of its own")
            let mismatched = try await pool.query(
                """
                SELECT count(*) AS n FROM credit_account a
                  LEFT JOIN (SELECT user_id, pool, sum(remaining) AS total FROM credit_grant GROUP BY user_id, pool) g
                         USING (user_id, pool)
                 WHERE a.balance <> coalesce(g.total, 0)
                """)
            #expect(try mismatched[0].decode("n", as: Int.self) == 0)
        }
    }
}
