import AppStore
import Credits
import Domain
import Events
import Foundation
import Postgres
import Storage
import StrictJSON

/// What one processing transaction ended in.
enum ProcessingOutcome: Sendable {
    /// Another worker owns the event now (our lease ran out): nothing was written.
    case leaseLost
    /// Committed: the event is SUCCEEDED (applied or recorded) or DEAD (refused, unmatched, conflict).
    case done(FulfillmentPlan, granted: Int)
}

/// One event ready to apply: claimed, opened and verified, with the time the rules see.
struct PendingEvent: Sendable {
    var event: ClaimedEvent
    var verified: VerifiedEvent
    var now: Date

    /// The chain the event's facts belong to.
    var facts: (environment: String, original: String)? {
        verified.transaction.map { ($0.fact.environment, $0.fact.originalTransactionID) }
            ?? verified.renewal.map { ($0.environment, $0.originalTransactionID) }
    }

    /// The chain whose lock and stored facts the event needs, as "environment/originalTransactionId"
    /// (the key of the chain's advisory lock everywhere); nil when the rules read no stored facts.
    var chain: String? {
        switch verified.source.action {
        case .recordOnly, .unknown, .consumptionRequest, .rescindConsent: nil
        default: facts.map { "\($0.environment)/\($0.original)" }
        }
    }
}

/// The SQL of fulfillment: one transaction for a batch of events with a handful of statements
/// whatever its size (PostgreSQL's cost is per statement and per round trip far more than per
/// row): lock the leases and the chains (`+Lock`), load everything the rules read (`+Load`), write
/// everything the plans say and complete the events, book the grants (`+Write`); refunds and
/// refusals add a few (`+Refuse`). A batch of one is the single-event path.
///
/// The events of a batch must touch disjoint chains, orders and accounts (see `conflictKeys`):
/// every load runs before every write, so two events of one chain would plan from the same stale
/// state, and one statement cannot upsert a row twice.
struct FulfillmentStore: Sendable {
    let leases: EventStore
    /// `app_key` of the catalogue rows this worker serves (the bundle id).
    let appKey: String
    /// A Sandbox deployment is an isolated test tenant.
    let everyoneIsTestUser: Bool
    /// Test-only: where to die (scenario 30).
    let crashPoint: CrashPoint?
    /// The event topic: facts a binding makes applicable are queued on it again.
    let topic: String
    /// What a grant may not take a pool past (`CREDITS_MAX_BALANCE`).
    let creditLimits: CreditLimits
    /// The grants, revocations and restorations an event books.
    let ledger: CreditLedger
    /// The chains' owners: family members bound, conflicting chains frozen.
    let chains: ChainBindingStore
    /// Whether the plans' outbound events are written (`OUTBOUND_EVENTS_ENABLED`).
    let outboundEvents: Bool
    /// Whether delivered transactions are queued for Finish Transaction (`APPLE_FINISH_TRANSACTIONS`).
    let finishTransactions: Bool

    /// Reads the JSON documents of the queries (dates are milliseconds, like Apple's) with the
    /// strict parser the verifier uses: Foundation's JSONDecoder was a tenth of a worker's CPU.
    static func decode<T: Decodable>(_ type: T.Type, json: String) throws -> T {
        try StrictJSON.decode(type, from: Array(json.utf8))
    }

    init(
        leases: EventStore, appKey: String, everyoneIsTestUser: Bool, topic: String,
        creditLimits: CreditLimits = CreditLimits(), crashPoint: CrashPoint? = nil, outboundEvents: Bool = true,
        finishTransactions: Bool = false
    ) {
        self.leases = leases
        self.finishTransactions = finishTransactions
        self.outboundEvents = outboundEvents
        self.creditLimits = creditLimits
        ledger = CreditLedger(pool: leases.pool)
        chains = ChainBindingStore(pool: leases.pool, topic: topic)
        self.topic = topic
        self.appKey = appKey
        self.everyoneIsTestUser = everyoneIsTestUser
        self.crashPoint = crashPoint
    }

    var pool: PostgresPool { leases.pool }

    /// What an event's load reads and its write changes beyond its own row: two events sharing a
    /// key cannot be in one batch. The chain covers the transaction, its linked order, its grants
    /// and the subscription row; the named order and the token's open orders are the only rows two
    /// chains can share.
    static func conflictKeys(_ pending: PendingEvent) -> [String] {
        var keys: [String] = []
        if let chain = pending.chain { keys.append("chain:" + chain) }
        if case .clientSubmission(let orderNo, _) = pending.verified.source { keys.append("order:\(orderNo)") }
        if let token = pending.verified.transaction?.appAccountTokenUUID { keys.append("token:\(token)") }
        return keys
    }

    /// Applies events with disjoint `conflictKeys` in ONE transaction; one outcome per event, in
    /// order. Throws (everything rolled back) if any statement fails.
    ///
    /// Generic plans: the lock and the completion join the events' keys to the partitioned table,
    /// which PostgreSQL otherwise plans again at each batch, over every month (1.6 ms each with
    /// 16 partitions, against 0.15 ms to run).
    func process(_ batch: [PendingEvent], owner: String) async throws -> [ProcessingOutcome] {
        try await pool.transaction(genericPlans: true) { db in
            let held = try await lock(batch, owner: owner, on: db)
            crashPoint.reached(.locked)
            let reading = batch.indices.filter { held.contains($0) && batch[$0].chain != nil }
            var next = try await load(reading.map { batch[$0] }, on: db).makeIterator()
            let plans: [FulfillmentPlan?] = batch.indices.map { index in
                guard held.contains(index) else { return nil }
                let pending = batch[index]
                let input =
                    pending.chain == nil
                    ? FulfillmentInput(
                        source: pending.verified.source, transaction: nil, renewal: nil, catalogue: [:],
                        everyoneIsTestUser: everyoneIsTestUser, now: pending.now)
                    : next.next()!
                return FulfillmentPlanner.plan(input)
            }
            crashPoint.reached(.loaded)
            var granted = Array(repeating: 0, count: batch.count)
            let completing = batch.indices.filter { index in
                switch plans[index]?.verdict {
                case .applied, .recorded: true
                default: false
                }
            }
            let written = try await write(completing.map { (batch[$0], plans[$0]!) }, owner: owner, on: db)
            for (index, count) in zip(completing, written) { granted[index] = count }
            for (pending, plan) in zip(batch, plans) {
                guard let plan else { continue }
                try await refuse(pending, plan, owner: owner, on: db)
            }
            crashPoint.reached(.written)
            return batch.indices.map { index in plans[index].map { .done($0, granted: granted[index]) } ?? .leaseLost }
        }
    }
}
