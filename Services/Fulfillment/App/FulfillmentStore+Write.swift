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
            try await ChainBindingStore.bindFamilyMember(
                member, environment: chain.environment, originalTransactionID: chain.original, topic: topic, on: db)
        }
        let rows = WriteRows(batch)
        let linked = rows.linkedOrders
        let completed = try await db.query(
            """
            WITH stored_transaction AS (\(Self.transactions(rows.transactions))
            ), stored_renewal AS (\(Self.renewals(rows.renewals))
            ), linked_order AS (
                UPDATE payment_order o
                   SET status = \(OrderStatus.fulfilled.rawValue), transaction_id = l.transaction_id,
                       original_transaction_id = l.original, environment = l.environment, amount_milliunits = l.price,
                       currency = l.currency, failure_code = NULL, updated_at = now()
                  FROM unnest(\(PostgresArray(linked.map(\.change.order.orderNo)))::text[],
                              \(PostgresArray(linked.map(\.change.order.transactionID)))::text[],
                              \(PostgresArray(linked.map(\.change.originalTransactionID)))::text[],
                              \(PostgresArray(linked.map(\.change.environment)))::text[],
                              \(PostgresArray(linked.map(\.record?.price)))::bigint[],
                              \(PostgresArray(linked.map(\.record?.currency)))::text[])
                       AS l(order_no, transaction_id, original, environment, price, currency)
                 WHERE o.order_no = l.order_no
                RETURNING 1
            ), new_order AS (\(Self.newOrders(rows.newOrders))
            ), subscription AS (\(Self.subscriptions(rows.subscriptions))
            ), history AS (\(Self.history(rows.history))
            ), done AS (
                UPDATE inbound_event e
                   SET process_status = \(sql: EventStatus.succeeded.literal), processed_at = now(), lease_owner = NULL,
                       lease_expires_at = NULL, error_code = NULL, error_message = NULL, updated_at = now()
                  FROM inbound_event_key k
                 WHERE k.id = ANY(\(PostgresArray(batch.map(\.pending.event.id)))::bigint[])
                   AND e.id = k.id AND e.received_at = k.received_at
                RETURNING e.kind, e.id
            ), proof AS (
                INSERT INTO processed_event (event_kind, event_id, worker_id, attempt)
                SELECT p.kind, p.id, \(owner), p.attempt
                  FROM unnest(\(PostgresArray(batch.map(\.pending.event.kind.rawValue)))::text[],
                              \(PostgresArray(batch.map(\.pending.event.id)))::bigint[],
                              \(PostgresArray(batch.map { $0.pending.event.retryCount + 1 }))::integer[]) AS p(kind, id, attempt)
                  JOIN done USING (kind, id)
                RETURNING 1
            )
            SELECT (SELECT count(*) FROM proof) AS completed
            """)
        guard try completed.first!.decode("completed", as: Int.self) == batch.count else {
            // Cannot happen under the row locks taken at the start; rolled back and retried if it does.
            throw ProcessingFailure.retryable(code: "FULFILLMENT_FAILED", message: "a leased event row was not completed")
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
        let booked = try await CreditLedger.grant(grants.flatMap { $0 }, limits: creditLimits, on: db)
        for (_, plan) in batch {
            for grant in plan.revocations {
                try await CreditLedger.revoke(grantKey: grant.grantKey, percentage: plan.revocationPercentage, on: db)
            }
            for grant in plan.restorations { try await CreditLedger.restore(grantKey: grant.grantKey, on: db) }
            if let ending = plan.restoreClearing, let user = plan.user {
                try await CreditLedger.restoreClearing(ending: ending, userID: user.userID, on: db)
            }
        }
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

    private static func transactions(_ t: [WriteRows.Transaction]) -> BatchInsert {
        BatchInsert(
            into: "apple_transaction",
            [
                .init("environment", "text[]", t.map(\.fact.environment), onConflict: .keep),
                .init("transaction_id", "text[]", t.map(\.fact.transactionID), onConflict: .keep),
                .init("original_transaction_id", "text[]", t.map(\.fact.originalTransactionID), onConflict: .keep),
                .init("web_order_line_item_id", "text[]", t.map(\.record?.webOrderLineItemID)),
                .init("app_account_token", "text[]", t.map(\.fact.appAccountToken), onConflict: .keep),
                // The first attribution stays: a later fact never moves a transaction to another user.
                .init("user_id", "text[]", t.map(\.user), onConflict: .set("coalesce(apple_transaction.user_id, EXCLUDED.user_id)")),
                .init("product_id", "text[]", t.map(\.fact.productID)),
                .init("transaction_reason", "text[]", t.map(\.fact.transactionReason)),
                .init("purchase_date", "timestamptz[]", t.map(\.fact.purchaseDate)),
                .init("original_purchase_date", "timestamptz[]", t.map(\.fact.originalPurchaseDate)),
                .init("expires_date", "timestamptz[]", t.map(\.fact.expiresDate)),
                .init("revocation_date", "timestamptz[]", t.map(\.fact.revocationDate)),
                .init("revocation_type", "text[]", t.map(\.record?.revocationType)),
                .init("revocation_reason", "integer[]", t.map(\.record?.revocationReason)),
                .init("revocation_percentage", "integer[]", t.map(\.fact.revocationPercentage)),
                .init("ownership_type", "text[]", t.map(\.fact.ownershipType)),
                .init("offer_type", "integer[]", t.map(\.fact.offerType)),
                .init("offer_identifier", "text[]", t.map(\.record?.offerIdentifier)),
                .init("offer_discount_type", "text[]", t.map(\.fact.offerDiscountType)),
                .init("offer_period", "text[]", t.map(\.fact.offerPeriod)),
                .init("is_upgraded", "boolean[]", t.map(\.fact.isUpgraded)),
                .init("price_milliunits", "bigint[]", t.map(\.record?.price)),
                .init("currency", "text[]", t.map(\.record?.currency)),
                .init("signed_date", "timestamptz[]", t.map(\.fact.signedDate)),
                .init("payload_hash", "text[]", t.map(\.record?.payloadHash)),
            ], conflict: .update(target: "(environment, transaction_id)", also: "updated_at = now()"))
    }

    private static func renewals(_ r: [RenewalFact]) -> BatchInsert {
        BatchInsert(
            into: "apple_renewal_info",
            [
                .init("environment", "text[]", r.map(\.environment), onConflict: .keep),
                .init("original_transaction_id", "text[]", r.map(\.originalTransactionID), onConflict: .keep),
                .init("product_id", "text[]", r.map(\.productID)),
                .init("auto_renew_product_id", "text[]", r.map(\.autoRenewProductID)),
                .init("auto_renew_enabled", "boolean[]", r.map(\.autoRenewEnabled)),
                .init("is_in_billing_retry", "boolean[]", r.map(\.isInBillingRetryPeriod)),
                .init("grace_period_expires_at", "timestamptz[]", r.map(\.gracePeriodExpiresDate)),
                .init("expiration_intent", "integer[]", r.map(\.expirationIntent)),
                .init("price_increase_status", "integer[]", r.map(\.priceIncreaseStatus)),
                .init("renewal_date", "timestamptz[]", r.map(\.renewalDate)),
                .init("renewal_price", "bigint[]", r.map(\.renewalPrice)),
                .init("renewal_currency", "text[]", r.map(\.renewalCurrency)),
                .init("signed_date", "timestamptz[]", r.map(\.signedDate)),
            ], conflict: .update(target: "(environment, original_transaction_id)", also: "updated_at = now()"))
    }

    /// Orders a fact creates (renewals, changes, recoveries): born FULFILLED; one already made by
    /// an earlier attempt is left as it is.
    private static func newOrders(_ n: [WriteRows.Order]) -> BatchInsert {
        BatchInsert(
            into: "payment_order",
            [
                .init("order_no", "text[]", n.map(\.change.order.orderNo)),
                .init("user_id", "text[]", n.map(\.user)),
                .init("product_id", "text[]", n.map(\.change.order.productID)),
                .init("subscription_group_id", "text[]", n.map(\.change.subscriptionGroupID)),
                .init("order_type", "text[]", n.map(\.change.order.type.rawValue)),
                .init("status", "text[]", n.map { _ in OrderStatus.fulfilled.rawValue }),
                .init("transaction_id", "text[]", n.map(\.change.order.transactionID)),
                .init("original_transaction_id", "text[]", n.map(\.change.originalTransactionID)),
                .init("environment", "text[]", n.map(\.change.environment)),
                .init("amount_milliunits", "bigint[]", n.map(\.record?.price)),
                .init("currency", "text[]", n.map(\.record?.currency)),
                .init("app_account_token", "uuid[]", n.map(\.record?.appAccountTokenUUID)),
            ], conflict: .doNothing)
    }

    private static func subscriptions(_ s: [WriteRows.Subscription]) -> BatchInsert {
        BatchInsert(
            into: "user_subscription",
            [
                .init("environment", "text[]", s.map(\.state.environment), onConflict: .keep),
                .init("original_transaction_id", "text[]", s.map(\.state.originalTransactionID), onConflict: .keep),
                // The owner is the first attribution (a conflict freezes the chain instead).
                .init("user_id", "text[]", s.map(\.user), onConflict: .keep),
                .init("subscription_group_id", "text[]", s.map(\.group)),
                .init("active_product_id", "text[]", s.map(\.state.activeProductID)),
                .init("pending_product_id", "text[]", s.map(\.state.pendingProductID)),
                .init("status", "text[]", s.map(\.state.status.rawValue)),
                .init("auto_renew_enabled", "boolean[]", s.map(\.state.autoRenewEnabled)),
                .init("expires_at", "timestamptz[]", s.map(\.state.expiresAt)),
                .init("grace_expires_at", "timestamptz[]", s.map(\.state.graceExpiresAt)),
                .init("last_transaction_id", "text[]", s.map(\.state.lastTransactionID)),
                .init("last_signed_date", "timestamptz[]", s.map(\.state.lastSignedDate)),
                .init("is_family_shared", "boolean[]", s.map(\.state.isFamilyShared)),
            ],
            conflict: .update(
                target: "(environment, original_transaction_id)",
                also: "version = user_subscription.version + 1, updated_at = now()"))
    }

    private static func history(_ h: [WriteRows.History]) -> BatchInsert {
        BatchInsert(
            into: "status_history",
            [
                .init("entity_type", "text[]", h.map(\.change.entity.rawValue)),
                .init("entity_key", "text[]", h.map(\.change.key)),
                .init("previous_status", "text[]", h.map(\.change.previous)),
                .init("current_status", "text[]", h.map(\.change.current)),
                .init("cause", "text[]", h.map(\.cause)),
                .init("event_kind", "text[]", h.map(\.kind)),
                .init("event_id", "bigint[]", h.map(\.eventID)),
            ], conflict: .none)
    }
}

/// The rows a batch's write statement inserts or updates, table by table (one array element per
/// row and column), with the same values the single-event statement wrote.
struct WriteRows {
    struct Transaction {
        var fact: TransactionFact
        /// The columns Apple signed beside the fact, from the event's own verified copy.
        var record: TransactionRecord?
        var user: String?
    }
    struct Order {
        var change: OrderChange
        /// The verified transaction the order is paid by (price, currency, token), when it is this event's.
        var record: TransactionRecord?
        var user: String?
    }
    struct Subscription {
        var state: SubscriptionState
        var user: String?
        var group: String?
    }
    struct History {
        var change: StatusChange
        var cause: String
        var kind: String
        var eventID: Int64
    }

    var transactions: [Transaction] = []
    var renewals: [RenewalFact] = []
    var linkedOrders: [Order] = []
    var newOrders: [Order] = []
    var subscriptions: [Subscription] = []
    var history: [History] = []

    init(_ batch: [(pending: PendingEvent, plan: FulfillmentPlan)]) {
        for (pending, plan) in batch {
            let user = plan.user?.userID
            let verified = pending.verified
            if let fact = plan.storeTransaction {
                transactions.append(
                    Transaction(fact: fact, record: verified.transaction.flatMap { $0.fact == fact ? $0 : nil }, user: user))
            }
            if let renewal = plan.storeRenewal { renewals.append(renewal) }
            if let change = plan.order {
                let order = Order(
                    change: change,
                    record: verified.transaction.flatMap { $0.fact.transactionID == change.order.transactionID ? $0 : nil },
                    user: user)
                if change.isNew { newOrders.append(order) } else { linkedOrders.append(order) }
            }
            if let change = plan.subscription {
                subscriptions.append(Subscription(state: change.state, user: user, group: change.subscriptionGroupID))
            }
            history += plan.history.map {
                History(change: $0, cause: verified.source.cause, kind: pending.event.kind.rawValue, eventID: pending.event.id)
            }
        }
    }
}
