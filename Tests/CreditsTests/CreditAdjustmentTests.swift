import Credits
import Domain
import Foundation
import Postgres
import TestSupport
import Testing

/// Manual adjustments of both signs on a real PostgreSQL: a debit never drives a pool below zero,
/// each number books once, and the balance stays the sum of its ledger.
@Suite(.timeLimit(.minutes(3)))
struct CreditAdjustmentTests {
    static let credit = Credits.micro

    func adjust(
        _ f: CreditsFixture, _ amount: MicroCredits, _ number: String, user: String = "alice", pool: CreditPool = .permanent
    ) async throws -> CreditAdjustment {
        try await f.pool.transaction {
            try await CreditLedger(pool: f.pool).adjust(
                userID: user, pool: pool, amount: amount, adjustmentNo: number, operator: "ops", reason: "test", limits: CreditLimits(), on: $0)
        }
    }

    @Test func aDebitTakesAtMostWhatThePoolHoldsAndRecordsTheRest() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("alice", .permanent, micro: 2_500_000)
            try await f.fund("alice", .subscription, micro: 9 * Self.credit)

            let debit = try await adjust(f, -4 * Self.credit, "ADJ-1")
            #expect(debit.booked && debit.applied == -2_500_000 && debit.unrecoverable == 1_500_000 && debit.balanceAfter == 0)
            #expect(try await f.balances("alice") == [.permanent: 0, .subscription: 9 * Self.credit], "other pools untouched")
            let entry = try #require(
                try await f.pool.query("SELECT delta, balance_after, reference FROM credit_ledger WHERE entry_type = 'ADJUSTMENT'").first)
            #expect(try entry.decode("delta", as: Int64.self) == -2_500_000 && entry.decode("balance_after", as: Int64.self) == 0)
            #expect(try entry.decode("reference", as: String.self) == "adjustment:ADJ-1")
            #expect(try await f.count("SELECT count(*) FROM credit_grant WHERE grant_key = 'adjustment:ADJ-1'") == 0, "a debit is no grant")
            #expect(
                try await f.count(
                    """
                    SELECT count(*) FROM audit_log WHERE action = 'CREDITS_ADJUSTED' AND (before ->> 'balance')::bigint = 2500000
                       AND (after ->> 'balance')::bigint = 0 AND (after ->> 'unrecoverable')::bigint = 1500000
                       AND after ->> 'adjustmentNo' = 'ADJ-1'
                    """) == 1)
            #expect(try await f.violations() == 0)
        }
    }

    @Test func aDebitOfExactlyTheBalanceEmptiesThePool() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("alice", .welcome, micro: 3 * Self.credit)
            let debit = try await adjust(f, -3 * Self.credit, "ADJ-2", user: "alice", pool: .welcome)
            #expect(
                debit
                    == CreditAdjustment(
                        adjustmentNo: "ADJ-2", userID: "alice", pool: .welcome, amount: -3 * Self.credit, applied: -3 * Self.credit,
                        unrecoverable: 0, balanceAfter: 0, booked: true))
            #expect(try await f.total("alice") == 0)
            #expect(try await f.violations() == 0)
        }
    }

    @Test func aDebitOfAnEmptyOrMissingPoolBooksOnlyTheUnrecoverablePart() async throws {
        try await CreditsFixture.with { f in
            try await f.user("alice")
            let debit = try await adjust(f, -1_000_001, "ADJ-3", user: "alice", pool: .subscription)
            #expect(debit.booked && debit.applied == 0 && debit.unrecoverable == 1_000_001 && debit.balanceAfter == 0)
            #expect(try await f.count("SELECT count(*) FROM credit_ledger") == 0, "no balance change, no ledger entry")
            #expect(try await f.count("SELECT count(*) FROM credit_account") == 0)
            #expect(try await f.count("SELECT count(*) FROM audit_log WHERE action = 'CREDITS_ADJUSTED'") == 1)
            #expect(try await f.count("SELECT unrecoverable FROM credit_adjustment WHERE adjustment_no = 'ADJ-3'") == 1_000_001)
            #expect(try await f.violations() == 0)
        }
    }

    @Test func aRetriedNumberBooksNothingAndAnswersTheFirstResult() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("alice", .permanent, micro: 5 * Self.credit)
            let first = try await adjust(f, -7 * Self.credit, "ADJ-4")
            // The pool is funded again before the retry: the retry must still take nothing.
            try await f.fund("alice", .permanent, micro: 10 * Self.credit)
            let again = try await adjust(f, -7 * Self.credit, "ADJ-4")
            var replayed = first
            replayed.booked = false
            #expect(again == replayed)
            #expect(try await f.balances("alice") == [.permanent: 10 * Self.credit])
            #expect(try await f.count("SELECT count(*) FROM credit_ledger WHERE entry_type = 'ADJUSTMENT'") == 1)
            #expect(try await f.count("SELECT count(*) FROM audit_log WHERE action = 'CREDITS_ADJUSTED'") == 1)
            #expect(try await f.violations() == 0)

            // A credit's number is taken as well, whatever sign or pool asks for it next.
            _ = try await adjust(f, 2 * Self.credit, "ADJ-5")
            await #expect(throws: CreditAdjustmentError.self) { try await adjust(f, -2 * Self.credit, "ADJ-5") }
            await #expect(throws: CreditAdjustmentError.self) { try await adjust(f, -7 * Self.credit, "ADJ-4", user: "alice", pool: .welcome) }
            #expect(try await f.total("alice") == 12 * Self.credit)
            #expect(try await f.violations() == 0)
        }
    }

    @Test func concurrentRetriesOfOneNumberBookItOnce() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("alice", .permanent, micro: 4 * Self.credit)
            let results = try await withThrowingTaskGroup(of: CreditAdjustment.self) { group in
                for _ in 0..<6 { group.addTask { try await self.adjust(f, -3 * Self.credit, "ADJ-6") } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(results.filter(\.booked).count == 1)
            #expect(Set(results.map(\.applied)) == [-3 * Self.credit])
            #expect(try await f.total("alice") == Self.credit)
            #expect(try await f.violations() == 0)
        }
    }

    @Test func anUnknownUserIsRefused() async throws {
        try await CreditsFixture.with { f throws in
            await #expect(throws: CreditAdjustmentError.unknownUser("nobody")) {
                try await adjust(f, -Self.credit, "ADJ-7", user: "nobody", pool: .permanent)
            }
            await #expect(throws: CreditAdjustmentError.unknownUser("nobody")) {
                try await adjust(f, Self.credit, "ADJ-8", user: "nobody", pool: .permanent)
            }
            #expect(try await f.count("SELECT count(*) FROM credit_adjustment") == 0)
        }
    }

    @Test(
        arguments: [
            ("3", 3_000_000), ("-2.5", -2_500_000), ("+0.000001", 1), ("-0.1", -100_000), ("9223372036854.775807", Int64.max),
            ("0", 0),
        ] as [(String, Int64)])
    func decimalCreditsParseExactly(_ text: String, _ micro: Int64) {
        #expect(CreditAmount.micro(text) == micro)
    }

    @Test(arguments: ["", "-", ".5", "1.", "1.0000001", "1e3", " 1", "1,5", "--1", "9223372036854.775808", "٣"])
    func notDecimalCredits(_ text: String) {
        #expect(CreditAmount.micro(text) == nil)
    }
}
