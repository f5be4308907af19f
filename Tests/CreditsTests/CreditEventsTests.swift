import Credits
import Domain
import Foundation
import Postgres
import Testing

/// The credit jobs and adjustments tell what they book as outbound events, in their transaction,
/// once per grant or adjustment however often they run.
@Suite struct CreditEventsTests {
    static let credit = Credits.micro(1)

    func events(_ f: CreditsFixture) async throws -> [String] {
        try await f.pool.query(
            "SELECT type || ':' || user_id || ':' || (data->>'amount') || ':' || (data->>'reason') AS e FROM outbound_event ORDER BY seq"
        ).map { try $0.decode("e", as: String.self) }
    }

    @Test func welcomeCreditsAreToldOncePerUser() async throws {
        try await CreditsFixture.with { f in
            for user in ["a", "b"] { try await f.user(user) }
            let jobs = f.jobs(welcome: 50, batchSize: 1)
            #expect(try await jobs.grantWelcomeCredits() == 2)
            #expect(try await jobs.grantWelcomeCredits() == 0)
            #expect(try await events(f) == ["credits.granted:a:50:WELCOME", "credits.granted:b:50:WELCOME"])
            #expect(
                try await f.count("SELECT count(*) FROM outbound_event WHERE sequence = 1 AND data->>'grantKey' LIKE 'welcome:%'") == 2)
        }
    }

    @Test func adjustmentsAreToldAsGrantedOrRevokedOnce() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("alice", .permanent, micro: 2_500_000)
            let ledger = CreditLedger(pool: f.pool)
            for _ in 0..<2 {
                try await ledger.adjust(
                    userID: "alice", pool: .permanent, amount: 3 * Self.credit, adjustmentNo: "ADJ-1", operator: "op", reason: "goodwill",
                    limits: CreditLimits())
            }
            try await ledger.adjust(
                userID: "alice", pool: .permanent, amount: -9 * Self.credit, adjustmentNo: "ADJ-2", operator: "op", reason: "abuse",
                limits: CreditLimits())
            // The debit took what the pool held (5.5), not what was asked.
            #expect(try await events(f) == ["credits.granted:alice:3:ADJUSTMENT", "credits.revoked:alice:5.5:ADJUSTMENT"])
        }
    }
}
