import Credits
import Domain
import Events
import Foundation
import Postgres
import Storage

extension FulfillmentStore {
    /// Writes what the plans say and completes the events in one statement (facts, orders,
    /// subscriptions, history, SUCCEEDED and its proof; one unnest() row per event and table), books
    /// every grant in one ledger call, then the revocations and restorations (refunds, rare).
    /// Returns how many grants were new, per event.
    func write(
        _ batch: [(pending: PendingEvent, plan: FulfillmentPlan)], owner: String, on db: PostgresConnection
    ) async throws -> [Int] {
        guard !batch.isEmpty else { return [] }
        // Before the rows that name the member as a chain's owner (the user row may be new).
        for (pending, plan) in batch {
            guard let member = plan.bindFamilyMember, let chain = pending.facts else { continue }
            try await chains.bindFamilyMember(member, environment: chain.environment, originalTransactionID: chain.original, on: db)
        }
        // The weakest evidence the rules accept is audited, under the worker's name, with the event.
        for (pending, plan) in batch {
            guard let method = plan.attribution, method.byAppleAccount, let user = plan.user,
                let fact = pending.verified.transaction
            else { continue }
            try await AuditLog(pool: pool).record(
                on: db, operator: owner, action: "PURCHASE_ATTRIBUTED",
                reason: "method=\(method.rawValue): the one user this Apple Account bought for",
                before: nil,
                after: AppTransactionAttribution(
                    method: method.rawValue, userId: user.userID,
                    environment: fact.fact.environment, transactionId: fact.fact.transactionID,
                    originalTransactionId: fact.fact.originalTransactionID, appTransactionId: fact.appTransactionID,
                    eventId: pending.event.id))
        }
        let rows = WriteRows(batch)
        let events = batch.map(\.pending.event)
        // The plans' outbound events in the same statement: committed with the change or not at all.
        let outbound = outboundEvents ? batch.flatMap(\.plan.events) : []
        let appendOutbound: PostgresQuery =
            outbound.isEmpty ? ")" : "), \(fragment: OutboundEventStore.appendCTEs(outbound))"
        // One statement for the whole batch (a statement per table and event cost a round trip
        // each); every part is the SQL of its table's owner.
        let completed = try await db.query(
            """
            WITH stored_transaction AS (\(fragment: ChainBindingStore.storeTransactions(rows.transactions))
            ), stored_renewal AS (\(fragment: ChainBindingStore.storeRenewals(rows.renewals))
            ), linked_order AS (\(fragment: OrderStore.fulfil(rows.linkedOrders))
            ), new_order AS (\(fragment: OrderStore.insertFulfilled(rows.newOrders))
            ), subscription AS (\(fragment: ChainBindingStore.storeProjections(rows.subscriptions))
            ), history AS (\(fragment: OrderStore.appendHistory(rows.history))
            ), done AS (\(fragment: EventStore.succeed(events))
            ), proof AS (\(fragment: EventStore.prove(events, owner: owner, succeeded: "done"))\(fragment: appendOutbound)
            SELECT (SELECT count(*) FROM proof) AS completed
            """)
        guard try completed.single().decode("completed", as: Int.self) == batch.count else {
            // Cannot happen under the row locks taken at the start; rolled back and retried if it does.
            throw ProcessingFailure.retryable(code: "FULFILLMENT_FAILED", message: "a leased event row was not completed")
        }
        if finishTransactions {
            // Queued with the delivery, called after the commit: Apple's answer never holds the apply.
            let delivered = batch.compactMap(\.plan.deliveredTransaction).map { ($0.environment, $0.transactionID) }
            try await TaskStore.requestFinishTransactions(delivered, requestedBy: owner, on: db)
        }
        let grants = batch.map { entry in
            let fact = entry.pending.verified.transaction?.fact
            let sourced = entry.plan.grants.map { (fact, $0) } + entry.plan.freedGrants.map { (Optional($0.transaction), $0.decision) }
            return sourced.compactMap { fact, decision in
                entry.plan.user.map {
                    CreditGrant(
                        userID: $0.userID, decision: decision, environment: fact?.environment,
                        transactionID: fact?.transactionID, originalTransactionID: fact?.originalTransactionID,
                        expiresAt: decision.pool == .subscription ? fact?.expiresDate : nil)
                }
            }
        }
        let booked = try await ledger.grant(grants.flatMap { $0 }, limits: creditLimits, on: db)
        var moved: [OutboundEvent] = []
        for (pending, plan) in batch {
            // Rare (a revoked transaction that would have completed an open order): its own statement.
            if let failure = plan.failedOrder {
                try await OrderStore.fail(
                    failure, cause: pending.verified.source.cause, kind: pending.event.kind.rawValue, eventID: pending.event.id,
                    on: db)
            }
            let moves = CreditMoves(pending: pending, plan: plan)
            for grant in plan.revocations {
                let taken = try await ledger.revoke(grantKey: grant.grantKey, percentage: plan.revocationPercentage, on: db)
                moved += moves.revoked(grant, amount: taken)
            }
            for grant in plan.restorations {
                moved += moves.restored(grant, amount: try await ledger.restore(grantKey: grant.grantKey, on: db))
            }
            if let ending = plan.restoreClearing, let user = plan.user {
                let given = try await ledger.restoreClearing(ending: ending, userID: user.userID, on: db)
                moved += moves.clearingRestored(ending, amount: given)
            }
        }
        // What refunds took and reversals gave back is known once booked: rare, a statement of its own.
        if outboundEvents, !moved.isEmpty { try await OutboundEventStore(pool: pool).append(moved, on: db) }
        // The ledger counts the batch; each event's share is what it planned (grant keys are unique
        // and the plans skip keys already booked), unless a key was booked meanwhile: then only a
        // batch of one can say whose grant it was, and a larger batch is retried one by one.
        let planned = grants.map(\.count)
        if booked == planned.reduce(0, +) { return planned }
        guard batch.count == 1 else {
            throw ProcessingFailure.retryable(code: "FULFILLMENT_FAILED", message: "grants booked differ from the plans")
        }
        return [booked]
    }
}

/// The rows a batch's write statement inserts or updates, table by table, in the row types of
/// the tables' owners.
struct WriteRows {
    var transactions: [ChainBindingStore.StoredTransaction] = []
    var renewals: [RenewalFact] = []
    var linkedOrders: [OrderStore.FulfilledOrder] = []
    var newOrders: [OrderStore.FulfilledOrder] = []
    var subscriptions: [ChainBindingStore.StoredProjection] = []
    var history: [OrderStore.HistoryEntry] = []

    init(_ batch: [(pending: PendingEvent, plan: FulfillmentPlan)]) {
        for (pending, plan) in batch {
            let user = plan.user?.userID
            let verified = pending.verified
            if let fact = plan.storeTransaction {
                // The columns Apple signed beside the fact, from the event's own verified copy.
                let record = verified.transaction.flatMap { $0.fact == fact ? $0 : nil }
                transactions.append(
                    ChainBindingStore.StoredTransaction(
                        fact: fact, webOrderLineItemID: record?.webOrderLineItemID, revocationType: record?.revocationType,
                        revocationReason: record?.revocationReason, offerIdentifier: record?.offerIdentifier, price: record?.price,
                        currency: record?.currency, payloadHash: record?.payloadHash, user: user,
                        appTransactionID: record?.appTransactionID))
            }
            if let renewal = plan.storeRenewal { renewals.append(renewal) }
            if let change = plan.order {
                // The verified transaction the order is paid by (price, currency, token), when it is this event's.
                let record = verified.transaction.flatMap { $0.fact.transactionID == change.order.transactionID ? $0 : nil }
                let order = OrderStore.FulfilledOrder(
                    change: change, price: record?.price, currency: record?.currency, appAccountToken: record?.appAccountTokenUUID,
                    user: user)
                if change.isNew { newOrders.append(order) } else { linkedOrders.append(order) }
            }
            if let change = plan.subscription {
                subscriptions.append(ChainBindingStore.StoredProjection(state: change.state, user: user, group: change.subscriptionGroupID))
            }
            history += plan.history.map {
                OrderStore.HistoryEntry(change: $0, cause: verified.source.cause, kind: pending.event.kind.rawValue, eventID: pending.event.id)
            }
        }
    }
}

/// The outbound events of an event's credit moves whose amounts the ledger decides when it books
/// them (refunds, their reversals, an undone clearing); keyed by the move, so a redelivery adds
/// nothing.
struct CreditMoves {
    let user: String?
    let fact: TransactionFact?
    let now: Date

    init(pending: PendingEvent, plan: FulfillmentPlan) {
        user = plan.user?.userID
        fact = pending.verified.transaction?.fact
        now = pending.now
    }

    private var environment: String { fact?.environment ?? "Production" }
    /// The moment of the fact that moved the credits (milliseconds), naming this refund or reversal.
    private var step: String {
        let date = fact?.revocationDate ?? fact?.signedDate ?? now
        return String(Int64((date.timeIntervalSince1970 * 1000).rounded()))
    }

    func revoked(_ lot: GrantRecord, amount: MicroCredits) -> [OutboundEvent] {
        guard amount > 0 else { return [] }
        return [
            CreditEvents.revoked(
                userID: lot.userID, environment: environment, grantKey: lot.grantKey, step: step, pool: lot.pool, amount: amount,
                reason: "REFUND", originalTransactionID: fact?.originalTransactionID, transactionID: fact?.transactionID, now: now)
        ]
    }

    func restored(_ lot: GrantRecord, amount: MicroCredits) -> [OutboundEvent] {
        guard amount > 0 else { return [] }
        return [
            CreditEvents.event(
                .creditsGranted, key: "credits.granted:\(lot.grantKey):restored:\(step)", userID: lot.userID,
                environment: environment, grantKey: lot.grantKey, pool: lot.pool, amount: amount, reason: "REFUND_REVERSED",
                originalTransactionID: fact?.originalTransactionID, transactionID: fact?.transactionID, now: now)
        ]
    }

    func clearingRestored(_ ending: String, amount: MicroCredits) -> [OutboundEvent] {
        guard let user, amount > 0 else { return [] }
        return [
            CreditEvents.event(
                .creditsGranted, key: "credits.granted:clearing-restored:\(ending):\(step)", userID: user,
                environment: environment, grantKey: nil, pool: .subscription, amount: amount, reason: "CLEARING_RESTORED",
                originalTransactionID: fact?.originalTransactionID, transactionID: fact?.transactionID, now: now)
        ]
    }
}

/// The audit row of a purchase attributed by its Apple Account (`AttributionMethod.byAppleAccount`).
struct AppTransactionAttribution: Encodable, Sendable {
    var method: String
    var userId: String
    var environment: String
    var transactionId: String
    var originalTransactionId: String
    var appTransactionId: String?
    var eventId: Int64
}
