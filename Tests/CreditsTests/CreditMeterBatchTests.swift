import Credits
import Domain
import Foundation
import Postgres
import TestSupport
import Testing

/// Usage calls charged in batches (as the ingress gathers concurrent calls): each call gets the
/// answer it would get alone, and calls of one user or one key in a batch see each other as if
/// sent one after the other.
@Suite(.timeLimit(.minutes(3)))
struct CreditMeterBatchTests {
    static let credit = Credits.micro
    static let now = Date.utc("2026-04-10T12:00:00Z")

    static func call(_ user: String, units: Int64, key: String = UUID().uuidString, rate: String = "call")
        -> (request: UsageRequest, now: Date)
    {
        (UsageRequest(service: "svc", idempotencyKey: key, userID: user, units: units, rateCode: rate, occurredAt: nil), now)
    }

    @Test func twoCallsOfOneUserThatTogetherExceedTheBalance() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("alice", .subscription, micro: 3 * Self.credit)
            try await f.fund("bob", .permanent, micro: 5 * Self.credit)
            try await f.rate("call", micro: Self.credit)
            let outcomes = try await f.pool.withConnection { db in
                try await CreditMeter(pool: f.pool).use(
                    batch: [Self.call("alice", units: 2), Self.call("bob", units: 1), Self.call("alice", units: 2)], on: db)
            }
            #expect(try outcomes[0].get().receipt().balance.microCredits == Self.credit)
            #expect(try outcomes[1].get().receipt().balance.microCredits == 4 * Self.credit)
            #expect(throws: UsageError.creditsExhausted(cost: 2 * Self.credit, available: Self.credit)) { try outcomes[2].get() }
            #expect(try await f.balances("alice") == [.subscription: Self.credit])
            #expect(try await f.count("SELECT count(*) FROM credit_usage_event") == 2)
            #expect(try await f.count("SELECT sum(total_cost)::int FROM credit_daily_bill WHERE user_id = 'alice'") == 2_000_000)
            #expect(try await f.violations() == 0)
        }
    }

    @Test func theSameKeyTwiceInOneBatchIsChargedOnceAndReplayed() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("alice", .subscription, micro: 10 * Self.credit)
            try await f.rate("call", micro: Self.credit)
            let outcomes = try await f.pool.withConnection { db in
                try await CreditMeter(pool: f.pool).use(
                    batch: [Self.call("alice", units: 2, key: "k"), Self.call("alice", units: 2, key: "k"), Self.call("alice", units: 3, key: "k")],
                    on: db)
            }
            let first = try outcomes[0].get()
            let again = try outcomes[1].get()
            #expect(!first.replayed && again.replayed && again.json == first.json)
            #expect(throws: UsageError.idempotencyConflict) { try outcomes[2].get() }
            #expect(try await f.total("alice") == 8 * Self.credit)
            #expect(try await f.count("SELECT count(*) FROM credit_ledger WHERE entry_type = 'USAGE'") == 1)
            // A later retry alone gets the same bytes.
            #expect(try await f.use("alice", units: 2, key: "k", now: Self.now).json == first.json)
        }
    }

    /// The batch's second call stores a key that an open transaction stored first (for another
    /// user): once that commits, the batch statement fails on the key and nothing of it stays.
    /// Each call is then charged alone: the first as if the batch never ran, the second refused as
    /// a reuse of the key, as it would be alone.
    @Test func aBatchWhoseStatementFailsIsChargedCallByCall() async throws {
        try await CreditsFixture.with { f in
            try await f.fund("alice", .subscription, micro: 10 * Self.credit)
            try await f.fund("bob", .subscription, micro: 10 * Self.credit)
            try await f.rate("call", micro: Self.credit)
            let batch = try await f.pool.withConnection { db in
                try await db.transaction { tx in
                    _ = try await CreditMeter(pool: f.pool).use(Self.call("bob", units: 1, key: "k").request, now: Self.now, on: tx)
                    let batch = Task {
                        await CreditMeter(pool: f.pool).use(batch: [Self.call("alice", units: 2, key: "a"), Self.call("alice", units: 3, key: "k")])
                    }
                    while try await f.count(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'") == 0
                    {
                        try await Task.sleep(for: .milliseconds(5))
                    }
                    return batch
                }
            }
            let outcomes = await batch.value
            // Ids 2 and 3 went to the batch, which rolled back.
            let charged = try outcomes[0].get()
            #expect(try !charged.replayed && charged.receipt().costMicroCredits == 2 * Self.credit && charged.receipt().usageId == 4)
            #expect(throws: UsageError.idempotencyConflict) { try outcomes[1].get() }
            #expect(try await f.total("alice") == 8 * Self.credit)
            #expect(try await f.total("bob") == 9 * Self.credit)
            #expect(try await f.count("SELECT count(*) FROM credit_usage_event") == 2)
            #expect(try await f.violations() == 0)
        }
    }

    /// The same seeded mix of calls (a few users, retried and reused keys, unknown rates, calls the
    /// balance cannot cover, now and then a grant) alone on one database and in batches of random
    /// sizes on another: the same answers, byte for byte, and the same books.
    @Test func batchedCallsGetTheAnswersTheyGetAlone() async throws {
        let seed = UInt64.random(in: 1...UInt64.max)
        var random = CreditLedgerRandomizedTests.SeededGenerator(state: seed)
        try await CreditsFixture.with { alone in
            try await CreditsFixture.with { batched in
                let users = (0..<4).map { "user-\($0)" }
                for f in [alone, batched] {
                    for (index, user) in users.enumerated() {
                        try await f.fund(user, .welcome, micro: Int64(index + 1) * 2 * Self.credit, key: "w-\(user)")
                    }
                    try await f.rate("call", micro: 250_001)
                    try await f.rate("big", micro: 2 * Self.credit)
                }
                typealias Answer = Result<UsageOutcome, UsageError>
                var sent: [UsageRequest] = []
                var kinds: [String: Int] = [:]
                var step = 0
                while step < 400 {
                    let size = Int.random(in: 1...24, using: &random)
                    var calls: [(request: UsageRequest, now: Date)] = []
                    for _ in 0..<size {
                        step += 1
                        var call = Self.call(
                            users.randomElement(using: &random)!, units: Int64.random(in: 1...6, using: &random), key: "k\(step)",
                            rate: ["call", "call", "big", "none"].randomElement(using: &random)!)
                        let earlier = sent.randomElement(using: &random)
                        switch Int.random(in: 0..<10, using: &random) {
                        case 0, 1: call.request = earlier ?? call.request  // a retry
                        case 2: call.request.idempotencyKey = earlier?.idempotencyKey ?? call.request.idempotencyKey
                        default: break
                        }
                        sent.append(call.request)
                        calls.append(call)
                    }
                    var expected: [Answer] = []
                    for call in calls {
                        do {
                            expected.append(.success(try await CreditMeter(pool: alone.pool).use(call.request, now: call.now)))
                        } catch let error as UsageError {
                            expected.append(.failure(error))
                        }
                    }
                    let answers = try await batched.pool.withConnection { try await CreditMeter(pool: batched.pool).use(batch: calls, on: $0) }
                    #expect(answers == expected, "seed \(seed)")
                    for answer in answers {
                        switch answer {
                        case .success(let outcome): kinds[outcome.replayed ? "replayed" : "charged", default: 0] += 1
                        case .failure(let error): kinds["\(error)".prefix(while: { $0 != "(" }).description, default: 0] += 1
                        }
                    }
                    if Int.random(in: 0..<3, using: &random) == 0 {
                        let user = users.randomElement(using: &random)!
                        for f in [alone, batched] { try await f.fund(user, .permanent, micro: 2 * Self.credit, key: "p\(step)") }
                    }
                }
                let books = """
                    SELECT string_agg(concat_ws(' ', user_id, pool, delta, balance_after, entry_type, reference), ',' ORDER BY id)
                      FROM credit_ledger
                    """
                let bills = "SELECT string_agg(concat_ws(' ', user_id, day, total_cost), ',' ORDER BY user_id, day) FROM credit_daily_bill"
                for sql in [books, bills] {
                    let one = try await alone.pool.query(PostgresQuery(stringLiteral: sql))[0].decode(0, as: String.self)
                    let other = try await batched.pool.query(PostgresQuery(stringLiteral: sql))[0].decode(0, as: String.self)
                    #expect(one == other, "seed \(seed)")
                }
                #expect(try await batched.violations() == 0)
                // The mix held every kind of answer.
                #expect(Set(kinds.keys) == ["charged", "replayed", "creditsExhausted", "idempotencyConflict", "unknownRate"], "\(kinds)")
            }
        }
    }
}
