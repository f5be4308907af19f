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
        case .recordOnly, .unknown, .consumptionRequest: nil
        default: facts.map { "\($0.environment)/\($0.original)" }
        }
    }
}

/// The SQL of fulfillment: one transaction for a batch of events with a handful of statements
/// whatever its size (PostgreSQL's cost is per statement and per round trip far more than per
/// row): lock the leases and the chains, load everything the rules read, write everything the
/// plans say and complete the events, book the grants; refunds and refusals add a few. A batch of
/// one is the single-event path.
///
/// The events of a batch must touch disjoint chains, orders and accounts (see `conflictKeys`):
/// every load runs before every write, so two events of one chain would plan from the same stale
/// state, and one statement cannot upsert a row twice.
struct FulfillmentStore: Sendable {
    let events: EventStore
    /// `app_key` of the catalogue rows this worker serves (the bundle id).
    let appKey: String
    /// A Sandbox deployment is an isolated test tenant.
    let everyoneIsTestUser: Bool
    /// Test-only: where to die (scenario 30).
    let crashPoint: CrashPoint?

    /// Reads the JSON documents of the queries (dates are milliseconds, like Apple's) with the
    /// strict parser the verifier uses: Foundation's JSONDecoder was a tenth of a worker's CPU.
    static func decode<T: Decodable>(_ type: T.Type, json: String) throws -> T {
        try StrictJSON.decode(type, from: Array(json.utf8))
    }

    init(events: EventStore, appKey: String, everyoneIsTestUser: Bool, crashPoint: CrashPoint? = nil) {
        self.events = events
        self.appKey = appKey
        self.everyoneIsTestUser = everyoneIsTestUser
        self.crashPoint = crashPoint
    }

    var pool: PostgresPool { events.pool }

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
    func process(_ batch: [PendingEvent], owner: String) async throws -> [ProcessingOutcome] {
        try await pool.transaction { db in
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

    /// Locks the event rows whose lease is still ours, then their chains; returns the positions held.
    /// A chain lock is a transaction advisory lock on "environment/originalTransactionId": it also
    /// covers a chain with no row yet. Event rows are locked before any chain, and chains in sorted
    /// order, so two workers never hold one lock each while waiting for the other's. It is its own
    /// statement so the next statement's snapshot sees everything the previous holders committed.
    private func lock(_ batch: [PendingEvent], owner: String, on db: PostgresConnection) async throws -> Set<Int> {
        func ids(_ kind: EventKind) -> PostgresArray<Int64> {
            PostgresArray(batch.filter { $0.event.kind == kind }.map(\.event.id))
        }
        let rows = try await db.query(
            """
            WITH notification AS MATERIALIZED (
                SELECT id FROM apple_notification_event
                 WHERE id = ANY(\(ids(.notification))) AND process_status = 'PROCESSING' AND lease_owner = \(owner)
                   FOR UPDATE
            ), submission AS MATERIALIZED (
                SELECT id FROM transaction_submission
                 WHERE id = ANY(\(ids(.submission))) AND process_status = 'PROCESSING' AND lease_owner = \(owner)
                   FOR UPDATE
            ), held AS MATERIALIZED (
                SELECT e.position, e.chain
                  FROM unnest(\(PostgresArray(batch.map(\.event.kind.rawValue)))::text[],
                              \(PostgresArray(batch.map(\.event.id)))::bigint[],
                              \(PostgresArray(batch.map(\.chain)))::text[]) WITH ORDINALITY AS e(kind, id, chain, position)
                 WHERE (e.kind = 'notification' AND e.id IN (SELECT id FROM notification))
                    OR (e.kind = 'submission' AND e.id IN (SELECT id FROM submission))
            ), chain_lock AS MATERIALIZED (
                SELECT pg_advisory_xact_lock(hashtextextended(c.chain, 0))
                  FROM (SELECT DISTINCT chain FROM held WHERE chain IS NOT NULL ORDER BY chain OFFSET 0) AS c
            )
            SELECT position FROM held WHERE (SELECT count(*) FROM chain_lock) >= 0
            """)
        return Set(try rows.map { Int(try $0.decode("position", as: Int64.self)) - 1 })
    }

    /// The facts and the row as JSON whose keys are the domain types' properties and whose dates
    /// are Apple's milliseconds, so they decode into exactly the values that were written.
    /// Milliseconds are computed inline rather than with the schema's `epoch_ms`: an IMMUTABLE SQL
    /// function around the STABLE `extract` is never inlined, so PostgreSQL parsed and planned its
    /// body again at every call site of every execution (~8% of its CPU in a profile of the worker pool).
    static let transactionJSON: StaticString = """
        json_build_object(
            'environment', t.environment, 'transactionID', t.transaction_id,
            'originalTransactionID', t.original_transaction_id, 'productID', t.product_id,
            'purchaseDate', (extract(epoch FROM t.purchase_date) * 1000)::bigint,
            'originalPurchaseDate', (extract(epoch FROM t.original_purchase_date) * 1000)::bigint,
            'expiresDate', (extract(epoch FROM t.expires_date) * 1000)::bigint,
            'revocationDate', (extract(epoch FROM t.revocation_date) * 1000)::bigint,
            'isUpgraded', t.is_upgraded, 'ownershipType', t.ownership_type, 'offerType', t.offer_type,
            'offerDiscountType', t.offer_discount_type, 'transactionReason', t.transaction_reason,
            'appAccountToken', t.app_account_token, 'signedDate', (extract(epoch FROM t.signed_date) * 1000)::bigint)
        """
    static let renewalJSON: StaticString = """
        json_build_object(
            'environment', r.environment, 'originalTransactionID', r.original_transaction_id,
            'productID', r.product_id, 'autoRenewProductID', r.auto_renew_product_id,
            'autoRenewEnabled', r.auto_renew_enabled, 'isInBillingRetryPeriod', r.is_in_billing_retry,
            'gracePeriodExpiresDate', (extract(epoch FROM r.grace_period_expires_at) * 1000)::bigint,
            'expirationIntent', r.expiration_intent, 'priceIncreaseStatus', r.price_increase_status,
            'renewalDate', (extract(epoch FROM r.renewal_date) * 1000)::bigint,
            'signedDate', (extract(epoch FROM r.signed_date) * 1000)::bigint)
        """
    static let stateJSON: StaticString = """
        json_build_object(
            'originalTransactionID', s.original_transaction_id, 'environment', s.environment,
            'activeProductID', s.active_product_id, 'pendingProductID', s.pending_product_id,
            'status', s.status, 'autoRenewEnabled', s.auto_renew_enabled,
            'expiresAt', (extract(epoch FROM s.expires_at) * 1000)::bigint,
            'graceExpiresAt', (extract(epoch FROM s.grace_expires_at) * 1000)::bigint,
            'lastTransactionID', s.last_transaction_id,
            'lastSignedDate', (extract(epoch FROM s.last_signed_date) * 1000)::bigint, 'isFamilyShared', s.is_family_shared)
        """

    private static let orderJSON: StaticString = """
        json_build_object('orderNo', o.order_no, 'userID', o.user_id, 'productID', o.product_id,
            'type', o.order_type, 'status', o.status, 'transactionID', o.transaction_id,
            'createdAt', (extract(epoch FROM o.created_at) * 1000)::bigint)
        """

    /// Everything the rules read, in one query returning one JSON document per event (in order).
    private func load(_ batch: [PendingEvent], on db: PostgresConnection) async throws -> [FulfillmentInput] {
        guard !batch.isEmpty else { return [] }
        let facts = batch.map { $0.verified.transaction?.fact }
        let chains = batch.map(\.facts)
        let orders = batch.map { pending -> String? in
            if case .clientSubmission(let number, _) = pending.verified.source { return number }
            return nil
        }
        let rows = try await db.query(
            """
            SELECT e.position, json_build_object(
              'tokenUser', (SELECT json_build_object('userID', u.user_id, 'isTestUser', u.is_test_user)
                              FROM user_account_token t JOIN app_user u ON u.user_id = t.user_id
                             WHERE t.app_account_token = e.token),
              'subscription', (SELECT json_build_object(
                                 'owner', json_build_object('userID', s.user_id, 'isTestUser',
                                     coalesce((SELECT is_test_user FROM app_user WHERE user_id = s.user_id), false)),
                                 'frozenReason', s.frozen_reason,
                                 'state', \(sql: Self.stateJSON))
                                 FROM user_subscription s
                                WHERE s.environment = e.environment AND s.original_transaction_id = e.original
                                  FOR UPDATE),
              'transactions', (SELECT json_agg(\(sql: Self.transactionJSON)) FROM apple_transaction t
                                WHERE t.environment = e.environment AND t.original_transaction_id = e.original),
              'transactionOwner', (SELECT user_id FROM apple_transaction
                                    WHERE environment = e.environment AND transaction_id = e.transaction_id),
              'renewal', (SELECT \(sql: Self.renewalJSON) FROM apple_renewal_info r
                           WHERE r.environment = e.environment AND r.original_transaction_id = e.original),
              'catalogue', (SELECT json_agg(json_build_object(
                              'productID', product_id, 'subscriptionGroupID', subscription_group_id,
                              'planCode', plan_code, 'planLevel', plan_level, 'duration', duration,
                              'creditsAmount', credits_amount, 'enabled', enabled,
                              'trialGrantsCredits', trial_grants_credits, 'upgradeGrant', upgrade_grant,
                              'familySharedGrantsCredits', family_shared_grants_credits))
                              FROM payment_product
                             WHERE channel = 'APPLE' AND app_key = \(appKey) AND NOT deleted
                               AND (product_id IN (e.product_id, e.renewal_product_id, e.auto_renew_product_id)
                                    OR product_id IN (SELECT product_id FROM apple_transaction
                                                       WHERE environment = e.environment
                                                         AND original_transaction_id = e.original))),
              'linkedOrder', (SELECT \(sql: Self.orderJSON) FROM payment_order o
                               WHERE o.channel = 'APPLE' AND o.environment = e.environment
                                 AND o.transaction_id = e.transaction_id FOR UPDATE),
              'submittedOrder', (SELECT \(sql: Self.orderJSON) FROM payment_order o WHERE o.order_no = e.order_no FOR UPDATE),
              'openOrders', (SELECT json_agg(open.j) FROM (
                               SELECT \(sql: Self.orderJSON) AS j
                                 FROM payment_order o JOIN user_account_token t ON t.user_id = o.user_id
                                WHERE t.app_account_token = e.token AND o.status IN ('CREATED', 'PENDING')
                                  AND o.product_id = e.product_id
                                  FOR UPDATE OF o) AS open),
              'grants', (SELECT json_agg(json_build_object(
                           'grantKey', grant_key, 'userID', user_id, 'pool', pool, 'amount', amount,
                           'revokedAmount', revoked_amount, 'unrecoverableAmount', unrecoverable_amount))
                           FROM credit_grant WHERE environment = e.environment AND transaction_id = e.transaction_id)
            ) AS loaded
              FROM unnest(\(PostgresArray(chains.map { $0?.0 }))::text[], \(PostgresArray(chains.map { $0?.1 }))::text[],
                          \(PostgresArray(batch.map { $0.verified.transaction?.appAccountTokenUUID }))::uuid[],
                          \(PostgresArray(facts.map { $0?.transactionID }))::text[],
                          \(PostgresArray(facts.map { $0?.productID }))::text[],
                          \(PostgresArray(batch.map { $0.verified.renewal?.productID }))::text[],
                          \(PostgresArray(batch.map { $0.verified.renewal?.autoRenewProductID }))::text[],
                          \(PostgresArray(orders))::text[])
                   WITH ORDINALITY AS e(environment, original, token, transaction_id, product_id, renewal_product_id,
                                        auto_renew_product_id, order_no, position)
             ORDER BY e.position
            """)
        guard rows.count == batch.count else {
            throw ProcessingFailure.retryable(
                code: "FULFILLMENT_FAILED", message: "the load returned \(rows.count) of \(batch.count) events")
        }
        return try zip(batch, rows).map { pending, row in
            let json: String = try row.decode("loaded")
            let loaded = try Self.decode(Loaded.self, json: json)
            var stored = ChainFacts()
            for fact in loaded.transactions ?? [] { stored.record(fact) }
            if let renewal = loaded.renewal { stored.record(renewal) }
            return FulfillmentInput(
                source: pending.verified.source, transaction: pending.verified.transaction?.fact,
                renewal: pending.verified.renewal, tokenUser: loaded.tokenUser, subscription: loaded.subscription,
                catalogue: Dictionary((loaded.catalogue ?? []).map { ($0.productID, $0) }) { first, _ in first },
                stored: stored, transactionOwner: loaded.transactionOwner, linkedOrder: loaded.linkedOrder,
                submittedOrder: loaded.submittedOrder, openOrders: loaded.openOrders ?? [], grants: loaded.grants ?? [],
                everyoneIsTestUser: everyoneIsTestUser, now: pending.now)
        }
    }

    private struct Loaded: Decodable {
        var tokenUser: UserRecord?
        var subscription: SubscriptionRecord?
        var transactions: [TransactionFact]?
        var transactionOwner: String?
        var renewal: RenewalFact?
        var catalogue: [CatalogueProduct]?
        var linkedOrder: OrderRecord?
        var submittedOrder: OrderRecord?
        var openOrders: [OrderRecord]?
        var grants: [GrantRecord]?
    }

    /// Writes what the plans say and completes the events in one statement (facts, orders,
    /// subscriptions, history, SUCCEEDED and its proof; one unnest() row per event and table), books
    /// every grant in one ledger call, then the revocations and restorations (refunds, rare).
    /// Returns how many grants were new, per event.
    private func write(
        _ batch: [(pending: PendingEvent, plan: FulfillmentPlan)], owner: String, on db: PostgresConnection
    ) async throws -> [Int] {
        guard !batch.isEmpty else { return [] }
        let rows = WriteRows(batch)
        let t = rows.transactions
        let r = rows.renewals
        let s = rows.subscriptions
        let h = rows.history
        let linked = rows.linkedOrders
        let new = rows.newOrders
        func done(_ kind: EventKind) -> PostgresArray<Int64> {
            PostgresArray(batch.filter { $0.pending.event.kind == kind }.map(\.pending.event.id))
        }
        let completed = try await db.query(
            """
            WITH stored_transaction AS (
                INSERT INTO apple_transaction (
                    environment, transaction_id, original_transaction_id, web_order_line_item_id, app_account_token,
                    user_id, product_id, transaction_reason, purchase_date, original_purchase_date, expires_date,
                    revocation_date, revocation_type, revocation_reason, ownership_type, offer_type, offer_identifier,
                    offer_discount_type, is_upgraded, price_milliunits, currency, signed_date, payload_hash)
                SELECT * FROM unnest(
                    \(PostgresArray(t.map(\.fact.environment)))::text[], \(PostgresArray(t.map(\.fact.transactionID)))::text[],
                    \(PostgresArray(t.map(\.fact.originalTransactionID)))::text[],
                    \(PostgresArray(t.map(\.record?.webOrderLineItemID)))::text[],
                    \(PostgresArray(t.map(\.fact.appAccountToken)))::text[], \(PostgresArray(t.map(\.user)))::text[],
                    \(PostgresArray(t.map(\.fact.productID)))::text[], \(PostgresArray(t.map(\.fact.transactionReason)))::text[],
                    \(PostgresArray(t.map(\.fact.purchaseDate)))::timestamptz[],
                    \(PostgresArray(t.map(\.fact.originalPurchaseDate)))::timestamptz[],
                    \(PostgresArray(t.map(\.fact.expiresDate)))::timestamptz[],
                    \(PostgresArray(t.map(\.fact.revocationDate)))::timestamptz[],
                    \(PostgresArray(t.map(\.record?.revocationType)))::text[],
                    \(PostgresArray(t.map(\.record?.revocationReason)))::integer[],
                    \(PostgresArray(t.map(\.fact.ownershipType)))::text[], \(PostgresArray(t.map(\.fact.offerType)))::integer[],
                    \(PostgresArray(t.map(\.record?.offerIdentifier)))::text[],
                    \(PostgresArray(t.map(\.fact.offerDiscountType)))::text[], \(PostgresArray(t.map(\.fact.isUpgraded)))::boolean[],
                    \(PostgresArray(t.map(\.record?.price)))::bigint[], \(PostgresArray(t.map(\.record?.currency)))::text[],
                    \(PostgresArray(t.map(\.fact.signedDate)))::timestamptz[], \(PostgresArray(t.map(\.record?.payloadHash)))::text[])
                ON CONFLICT (environment, transaction_id) DO UPDATE SET
                    web_order_line_item_id = EXCLUDED.web_order_line_item_id, product_id = EXCLUDED.product_id,
                    transaction_reason = EXCLUDED.transaction_reason, purchase_date = EXCLUDED.purchase_date,
                    original_purchase_date = EXCLUDED.original_purchase_date, expires_date = EXCLUDED.expires_date,
                    revocation_date = EXCLUDED.revocation_date, revocation_type = EXCLUDED.revocation_type,
                    revocation_reason = EXCLUDED.revocation_reason, ownership_type = EXCLUDED.ownership_type,
                    offer_type = EXCLUDED.offer_type, offer_identifier = EXCLUDED.offer_identifier,
                    offer_discount_type = EXCLUDED.offer_discount_type, is_upgraded = EXCLUDED.is_upgraded,
                    price_milliunits = EXCLUDED.price_milliunits, currency = EXCLUDED.currency,
                    signed_date = EXCLUDED.signed_date, payload_hash = EXCLUDED.payload_hash,
                    user_id = coalesce(apple_transaction.user_id, EXCLUDED.user_id), updated_at = now()
                RETURNING 1
            ), stored_renewal AS (
                INSERT INTO apple_renewal_info (
                    environment, original_transaction_id, product_id, auto_renew_product_id, auto_renew_enabled,
                    is_in_billing_retry, grace_period_expires_at, expiration_intent, price_increase_status, renewal_date,
                    signed_date)
                SELECT * FROM unnest(
                    \(PostgresArray(r.map(\.environment)))::text[], \(PostgresArray(r.map(\.originalTransactionID)))::text[],
                    \(PostgresArray(r.map(\.productID)))::text[], \(PostgresArray(r.map(\.autoRenewProductID)))::text[],
                    \(PostgresArray(r.map(\.autoRenewEnabled)))::boolean[],
                    \(PostgresArray(r.map(\.isInBillingRetryPeriod)))::boolean[],
                    \(PostgresArray(r.map(\.gracePeriodExpiresDate)))::timestamptz[],
                    \(PostgresArray(r.map(\.expirationIntent)))::integer[], \(PostgresArray(r.map(\.priceIncreaseStatus)))::integer[],
                    \(PostgresArray(r.map(\.renewalDate)))::timestamptz[], \(PostgresArray(r.map(\.signedDate)))::timestamptz[])
                ON CONFLICT (environment, original_transaction_id) DO UPDATE SET
                    product_id = EXCLUDED.product_id, auto_renew_product_id = EXCLUDED.auto_renew_product_id,
                    auto_renew_enabled = EXCLUDED.auto_renew_enabled, is_in_billing_retry = EXCLUDED.is_in_billing_retry,
                    grace_period_expires_at = EXCLUDED.grace_period_expires_at,
                    expiration_intent = EXCLUDED.expiration_intent,
                    price_increase_status = EXCLUDED.price_increase_status, renewal_date = EXCLUDED.renewal_date,
                    signed_date = EXCLUDED.signed_date, updated_at = now()
                RETURNING 1
            ), linked_order AS (
                UPDATE payment_order o
                   SET status = 'FULFILLED', transaction_id = l.transaction_id, original_transaction_id = l.original,
                       environment = l.environment, amount_milliunits = l.price, currency = l.currency, failure_code = NULL,
                       updated_at = now()
                  FROM unnest(\(PostgresArray(linked.map(\.change.order.orderNo)))::text[],
                              \(PostgresArray(linked.map(\.change.order.transactionID)))::text[],
                              \(PostgresArray(linked.map(\.change.originalTransactionID)))::text[],
                              \(PostgresArray(linked.map(\.change.environment)))::text[],
                              \(PostgresArray(linked.map(\.record?.price)))::bigint[],
                              \(PostgresArray(linked.map(\.record?.currency)))::text[])
                       AS l(order_no, transaction_id, original, environment, price, currency)
                 WHERE o.order_no = l.order_no
                RETURNING 1
            ), new_order AS (
                INSERT INTO payment_order (
                    order_no, user_id, product_id, subscription_group_id, order_type, status, transaction_id,
                    original_transaction_id, environment, amount_milliunits, currency, app_account_token)
                SELECT n.order_no, n.user_id, n.product_id, n.subscription_group_id, n.order_type, 'FULFILLED',
                       n.transaction_id, n.original, n.environment, n.price, n.currency, n.token
                  FROM unnest(\(PostgresArray(new.map(\.change.order.orderNo)))::text[], \(PostgresArray(new.map(\.user)))::text[],
                              \(PostgresArray(new.map(\.change.order.productID)))::text[],
                              \(PostgresArray(new.map(\.change.subscriptionGroupID)))::text[],
                              \(PostgresArray(new.map(\.change.order.type.rawValue)))::text[],
                              \(PostgresArray(new.map(\.change.order.transactionID)))::text[],
                              \(PostgresArray(new.map(\.change.originalTransactionID)))::text[],
                              \(PostgresArray(new.map(\.change.environment)))::text[],
                              \(PostgresArray(new.map(\.record?.price)))::bigint[],
                              \(PostgresArray(new.map(\.record?.currency)))::text[],
                              \(PostgresArray(new.map(\.record?.appAccountTokenUUID)))::uuid[])
                       AS n(order_no, user_id, product_id, subscription_group_id, order_type, transaction_id, original,
                            environment, price, currency, token)
                ON CONFLICT DO NOTHING
                RETURNING 1
            ), subscription AS (
                INSERT INTO user_subscription (
                    environment, original_transaction_id, user_id, subscription_group_id, active_product_id,
                    pending_product_id, status, auto_renew_enabled, expires_at, grace_expires_at, last_transaction_id,
                    last_signed_date, is_family_shared)
                SELECT * FROM unnest(
                    \(PostgresArray(s.map(\.state.environment)))::text[],
                    \(PostgresArray(s.map(\.state.originalTransactionID)))::text[],
                    \(PostgresArray(s.map(\.user)))::text[], \(PostgresArray(s.map(\.group)))::text[],
                    \(PostgresArray(s.map(\.state.activeProductID)))::text[],
                    \(PostgresArray(s.map(\.state.pendingProductID)))::text[],
                    \(PostgresArray(s.map(\.state.status.rawValue)))::text[],
                    \(PostgresArray(s.map(\.state.autoRenewEnabled)))::boolean[],
                    \(PostgresArray(s.map(\.state.expiresAt)))::timestamptz[],
                    \(PostgresArray(s.map(\.state.graceExpiresAt)))::timestamptz[],
                    \(PostgresArray(s.map(\.state.lastTransactionID)))::text[],
                    \(PostgresArray(s.map(\.state.lastSignedDate)))::timestamptz[],
                    \(PostgresArray(s.map(\.state.isFamilyShared)))::boolean[])
                ON CONFLICT (environment, original_transaction_id) DO UPDATE SET
                    subscription_group_id = EXCLUDED.subscription_group_id, active_product_id = EXCLUDED.active_product_id,
                    pending_product_id = EXCLUDED.pending_product_id, status = EXCLUDED.status,
                    auto_renew_enabled = EXCLUDED.auto_renew_enabled, expires_at = EXCLUDED.expires_at,
                    grace_expires_at = EXCLUDED.grace_expires_at, last_transaction_id = EXCLUDED.last_transaction_id,
                    last_signed_date = EXCLUDED.last_signed_date, is_family_shared = EXCLUDED.is_family_shared,
                    version = user_subscription.version + 1, updated_at = now()
                RETURNING 1
            ), history AS (
                INSERT INTO status_history (entity_type, entity_key, previous_status, current_status, cause, event_kind, event_id)
                SELECT * FROM unnest(
                    \(PostgresArray(h.map(\.change.entity.rawValue)))::text[], \(PostgresArray(h.map(\.change.key)))::text[],
                    \(PostgresArray(h.map(\.change.previous)))::text[], \(PostgresArray(h.map(\.change.current)))::text[],
                    \(PostgresArray(h.map(\.cause)))::text[], \(PostgresArray(h.map(\.kind)))::text[],
                    \(PostgresArray(h.map(\.eventID)))::bigint[])
                RETURNING 1
            ), done_notification AS (
                UPDATE apple_notification_event
                   SET process_status = 'SUCCEEDED', processed_at = now(), lease_owner = NULL, lease_expires_at = NULL,
                       error_code = NULL, error_message = NULL, updated_at = now()
                 WHERE id = ANY(\(done(.notification)))
                RETURNING 'notification' AS kind, id
            ), done_submission AS (
                UPDATE transaction_submission
                   SET process_status = 'SUCCEEDED', processed_at = now(), lease_owner = NULL, lease_expires_at = NULL,
                       error_code = NULL, error_message = NULL, updated_at = now()
                 WHERE id = ANY(\(done(.submission)))
                RETURNING 'submission' AS kind, id
            ), proof AS (
                INSERT INTO processed_event (event_kind, event_id, worker_id, attempt)
                SELECT p.kind, p.id, \(owner), p.attempt
                  FROM unnest(\(PostgresArray(batch.map(\.pending.event.kind.rawValue)))::text[],
                              \(PostgresArray(batch.map(\.pending.event.id)))::bigint[],
                              \(PostgresArray(batch.map { $0.pending.event.retryCount + 1 }))::integer[]) AS p(kind, id, attempt)
                  JOIN (SELECT * FROM done_notification UNION ALL SELECT * FROM done_submission) AS done USING (kind, id)
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
            return entry.plan.grants.compactMap { decision in
                entry.plan.user.map {
                    CreditGrant(
                        userID: $0.userID, decision: decision, environment: fact?.environment,
                        transactionID: fact?.transactionID, originalTransactionID: fact?.originalTransactionID)
                }
            }
        }
        let booked = try await CreditLedger.grant(grants.flatMap { $0 }, on: db)
        for (_, plan) in batch {
            for grant in plan.revocations { try await CreditLedger.revoke(grantKey: grant.grantKey, on: db) }
            for grant in plan.restorations { try await CreditLedger.restore(grantKey: grant.grantKey, on: db) }
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

    /// The verdicts that bury the event, each with what it records, in the batch's transaction.
    private func refuse(_ pending: PendingEvent, _ plan: FulfillmentPlan, owner: String, on db: PostgresConnection)
        async throws
    {
        let event = pending.event
        switch plan.verdict {
        case .applied, .recorded:
            return
        case .unmatched(let reason):
            try await keepUnmatched(event, pending.verified, reason: reason, on: db)
            try await events.fail(
                event, owner: owner, code: reason.rawValue, message: "kept in unmatched_fact; replay after the fix",
                retryAt: nil, on: db)
        case .accountConflict(let attributed, let other):
            if plan.freezeChain, let chain = pending.facts { try await freeze(chain, on: db) }
            try await events.fail(
                event, owner: owner, code: "ACCOUNT_CONFLICT",
                message: "attributed to user \(attributed), claimed by user \(other); chain frozen", retryAt: nil,
                on: db)
        case .refused(let code, let reason):
            try await events.fail(event, owner: owner, code: code, message: reason, retryAt: nil, on: db)
        }
    }

    /// Keeps the summary of a fact that could not be attributed, so it can be found and replayed.
    private func keepUnmatched(
        _ event: ClaimedEvent, _ verified: VerifiedEvent, reason: UnmatchedReason, on db: PostgresConnection
    ) async throws {
        let fact = verified.transaction?.fact
        var type: String?
        var subtype: String?
        if case .notification(let t, let s) = verified.source {
            type = t
            subtype = s
        }
        var submitter: String?
        switch verified.source {
        case .clientSubmission(_, let user), .observedSubmission(let user): submitter = user
        case .notification: break
        }
        try await db.query(
            """
            INSERT INTO unmatched_fact (
                event_kind, event_id, reason, environment, notification_type, subtype, transaction_id,
                original_transaction_id, product_id, app_account_token, submitted_by)
            VALUES (\(event.kind.rawValue), \(event.id), \(reason.rawValue), \(event.payload.environment), \(type), \(subtype),
                    \(fact?.transactionID), \(fact?.originalTransactionID ?? verified.renewal?.originalTransactionID),
                    \(fact?.productID ?? verified.renewal?.productID), \(fact?.appAccountToken), \(submitter))
            ON CONFLICT (event_kind, event_id) DO UPDATE SET
                reason = EXCLUDED.reason, product_id = EXCLUDED.product_id, app_account_token = EXCLUDED.app_account_token,
                updated_at = now(), replayed_at = NULL
            """)
    }

    /// Nothing moves on a chain with an account conflict until an operator clears it.
    private func freeze(_ chain: (environment: String, original: String), on db: PostgresConnection) async throws {
        try await db.query(
            """
            UPDATE user_subscription SET frozen_reason = 'ACCOUNT_CONFLICT', updated_at = now()
             WHERE environment = \(chain.environment) AND original_transaction_id = \(chain.original)
               AND frozen_reason IS NULL
            """)
    }
}

/// The rows a batch's write statement inserts or updates, table by table (one array element per
/// row and column), with the same values the single-event statement wrote.
private struct WriteRows {
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
