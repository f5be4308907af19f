import Credits
import Domain
import Events
import Foundation
import Postgres
import Storage

/// What one processing transaction ended in.
enum ProcessingOutcome: Sendable {
    /// Another worker owns the event now (our lease ran out): nothing was written.
    case leaseLost
    /// Committed: the event is SUCCEEDED (applied or recorded) or DEAD (refused, unmatched, conflict).
    case done(FulfillmentPlan, granted: Int)
}

/// The SQL of fulfillment: one transaction per event with few round trips — lock the lease and the
/// chain, load everything the rules read in one query, write everything the plan says and complete
/// the event in one statement (refunds add a few).
struct FulfillmentStore: Sendable {
    let events: EventStore
    /// `app_key` of the catalogue rows this worker serves (the bundle id).
    let appKey: String
    /// A Sandbox deployment is an isolated test tenant.
    let everyoneIsTestUser: Bool
    /// Test-only: where to die (scenario 30).
    let crashPoint: CrashPoint?
    private let decoder = Self.decoder()

    /// Reads the JSON of the queries: dates are milliseconds, like Apple's.
    static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .millisecondsSince1970
        return decoder
    }

    init(events: EventStore, appKey: String, everyoneIsTestUser: Bool, crashPoint: CrashPoint? = nil) {
        self.events = events
        self.appKey = appKey
        self.everyoneIsTestUser = everyoneIsTestUser
        self.crashPoint = crashPoint
    }

    var pool: PostgresPool { events.pool }

    /// Applies a verified event in one transaction.
    func process(_ event: ClaimedEvent, _ verified: VerifiedEvent, owner: String, now: Date) async throws -> ProcessingOutcome {
        let chain = verified.transaction.map { ($0.fact.environment, $0.fact.originalTransactionID) }
            ?? verified.renewal.map { ($0.environment, $0.originalTransactionID) }
        let needsFacts: Bool
        switch verified.source.action {
        case .recordOnly, .unknown, .consumptionRequest: needsFacts = false
        default: needsFacts = chain != nil
        }
        return try await pool.transaction { db in
            guard try await lock(event, chain: needsFacts ? chain : nil, owner: owner, on: db) else { return .leaseLost }
            crashPoint.reached(.locked)
            let plan: FulfillmentPlan
            if needsFacts, let chain {
                let input = try await load(verified, chain: chain, now: now, on: db)
                plan = FulfillmentPlanner.plan(input)
            } else {
                plan = FulfillmentPlanner.plan(
                    FulfillmentInput(
                        source: verified.source, transaction: nil, renewal: nil, catalogue: [:],
                        everyoneIsTestUser: everyoneIsTestUser, now: now))
            }
            crashPoint.reached(.loaded)
            var granted = 0
            switch plan.verdict {
            case .applied, .recorded:
                granted = try await write(plan, verified, event: event, owner: owner, on: db)
            case .unmatched(let reason):
                try await keepUnmatched(event, verified, reason: reason, on: db)
                try await events.fail(
                    event, owner: owner, code: reason.rawValue, message: "kept in unmatched_fact; replay after the fix",
                    retryAt: nil, on: db)
            case .accountConflict(let attributed, let other):
                if plan.freezeChain, let chain { try await freeze(chain, on: db) }
                try await events.fail(
                    event, owner: owner, code: "ACCOUNT_CONFLICT",
                    message: "attributed to user \(attributed), claimed by user \(other); chain frozen", retryAt: nil,
                    on: db)
            case .refused(let code, let reason):
                try await events.fail(event, owner: owner, code: code, message: reason, retryAt: nil, on: db)
            }
            crashPoint.reached(.written)
            return .done(plan, granted: granted)
        }
    }

    /// Locks the event row if the lease is still ours, then the chain. The chain lock is a
    /// transaction advisory lock on (environment, originalTransactionId): it also covers a chain
    /// with no row yet, and it is taken in its own statement so the next statement's snapshot sees
    /// everything the previous holder committed.
    private func lock(
        _ event: ClaimedEvent, chain: (String, String)?, owner: String, on db: PostgresConnection
    ) async throws -> Bool {
        guard let (environment, original) = chain else {
            return try await events.lockLease(of: event, owner: owner, on: db)
        }
        let table = Self.table(event.kind)
        // The subquery locks the event row before the outer projection takes the chain lock, so two
        // workers never hold one lock each while waiting for the other's.
        let rows = try await db.query(
            """
            SELECT pg_advisory_xact_lock(hashtextextended(\(environment)::text || '/' || \(original)::text, 0)) IS NULL AS locked
              FROM (SELECT id FROM \(sql: table)
                     WHERE id = \(event.id) AND process_status = 'PROCESSING' AND lease_owner = \(owner)
                    OFFSET 0 FOR UPDATE) AS leased
            """)
        return rows.count == 1
    }

    /// The event table of a kind, as SQL text that can never come from input.
    static func table(_ kind: EventKind) -> StaticString {
        kind == .submission ? "transaction_submission" : "apple_notification_event"
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

    /// Everything the rules read, in one query returning one JSON document.
    private func load(_ verified: VerifiedEvent, chain: (String, String), now: Date, on db: PostgresConnection)
        async throws -> FulfillmentInput
    {
        let (environment, original) = chain
        let transaction = verified.transaction
        let token = transaction?.appAccountTokenUUID
        let transactionID = transaction?.fact.transactionID
        let productIDs = [transaction?.fact.productID, verified.renewal?.productID, verified.renewal?.autoRenewProductID]
            .compactMap { $0 }
        var orderNo: String?
        if case .clientSubmission(let number, _) = verified.source { orderNo = number }
        let rows = try await db.query(
            """
            SELECT json_build_object(
              'tokenUser', (SELECT json_build_object('userID', u.user_id, 'isTestUser', u.is_test_user)
                              FROM user_account_token t JOIN app_user u ON u.user_id = t.user_id
                             WHERE t.app_account_token = \(token)),
              'subscription', (SELECT json_build_object(
                                 'owner', json_build_object('userID', s.user_id, 'isTestUser',
                                     coalesce((SELECT is_test_user FROM app_user WHERE user_id = s.user_id), false)),
                                 'frozenReason', s.frozen_reason,
                                 'state', \(sql: Self.stateJSON))
                                 FROM user_subscription s
                                WHERE s.environment = \(environment) AND s.original_transaction_id = \(original)
                                  FOR UPDATE),
              'transactions', (SELECT json_agg(\(sql: Self.transactionJSON)) FROM apple_transaction t
                                WHERE t.environment = \(environment) AND t.original_transaction_id = \(original)),
              'transactionOwner', (SELECT user_id FROM apple_transaction
                                    WHERE environment = \(environment) AND transaction_id = \(transactionID)),
              'renewal', (SELECT \(sql: Self.renewalJSON) FROM apple_renewal_info r
                           WHERE r.environment = \(environment) AND r.original_transaction_id = \(original)),
              'catalogue', (SELECT json_agg(json_build_object(
                              'productID', product_id, 'subscriptionGroupID', subscription_group_id,
                              'planCode', plan_code, 'planLevel', plan_level, 'duration', duration,
                              'creditsAmount', credits_amount, 'enabled', enabled,
                              'trialGrantsCredits', trial_grants_credits, 'upgradeGrant', upgrade_grant,
                              'familySharedGrantsCredits', family_shared_grants_credits))
                              FROM payment_product
                             WHERE channel = 'APPLE' AND app_key = \(appKey) AND NOT deleted
                               AND (product_id = ANY(\(PostgresArray(productIDs))::text[])
                                    OR product_id IN (SELECT product_id FROM apple_transaction
                                                       WHERE environment = \(environment)
                                                         AND original_transaction_id = \(original)))),
              'linkedOrder', (SELECT \(sql: Self.orderJSON) FROM payment_order o
                               WHERE o.channel = 'APPLE' AND o.environment = \(environment)
                                 AND o.transaction_id = \(transactionID) FOR UPDATE),
              'submittedOrder', (SELECT \(sql: Self.orderJSON) FROM payment_order o WHERE o.order_no = \(orderNo) FOR UPDATE),
              'openOrders', (SELECT json_agg(open.j) FROM (
                               SELECT \(sql: Self.orderJSON) AS j
                                 FROM payment_order o JOIN user_account_token t ON t.user_id = o.user_id
                                WHERE t.app_account_token = \(token) AND o.status IN ('CREATED', 'PENDING')
                                  AND o.product_id = \(transaction?.fact.productID)
                                  FOR UPDATE OF o) AS open),
              'grants', (SELECT json_agg(json_build_object(
                           'grantKey', grant_key, 'userID', user_id, 'pool', pool, 'amount', amount,
                           'revokedAmount', revoked_amount, 'unrecoverableAmount', unrecoverable_amount))
                           FROM credit_grant WHERE environment = \(environment) AND transaction_id = \(transactionID))
            ) AS loaded
            """)
        let json: String = try rows.first!.decode("loaded")
        let loaded = try decoder.decode(Loaded.self, from: Data(json.utf8))
        var stored = ChainFacts()
        for fact in loaded.transactions ?? [] { stored.record(fact) }
        if let renewal = loaded.renewal { stored.record(renewal) }
        return FulfillmentInput(
            source: verified.source, transaction: transaction?.fact, renewal: verified.renewal, tokenUser: loaded.tokenUser,
            subscription: loaded.subscription,
            catalogue: Dictionary((loaded.catalogue ?? []).map { ($0.productID, $0) }) { first, _ in first },
            stored: stored, transactionOwner: loaded.transactionOwner, linkedOrder: loaded.linkedOrder,
            submittedOrder: loaded.submittedOrder, openOrders: loaded.openOrders ?? [], grants: loaded.grants ?? [],
            everyoneIsTestUser: everyoneIsTestUser, now: now)
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

    /// Writes what the plan says and completes the event in one statement (facts, order,
    /// subscription, history, SUCCEEDED and its proof); grants, then
    /// revocations and restorations (refunds, rare), follow through the credits ledger. Returns how many grants were new.
    private func write(
        _ plan: FulfillmentPlan, _ verified: VerifiedEvent, event: ClaimedEvent, owner: String, on db: PostgresConnection
    ) async throws -> Int {
        let user = plan.user?.userID
        let t = plan.storeTransaction
        // The columns Apple signed beside the fact, from this event's own verified copy.
        let r = verified.transaction.flatMap { $0.fact == t ? $0 : nil }
        let renewal = plan.storeRenewal
        let order = plan.order
        let orderFacts = verified.transaction.flatMap { $0.fact.transactionID == order?.order.transactionID ? $0 : nil }
        let state = plan.subscription?.state
        let grants = plan.grants
        let fact = verified.transaction?.fact
        let table = Self.table(event.kind)
        let rows = try await db.query(
            """
            WITH stored_transaction AS (
                INSERT INTO apple_transaction (
                    environment, transaction_id, original_transaction_id, web_order_line_item_id, app_account_token,
                    user_id, product_id, transaction_reason, purchase_date, original_purchase_date, expires_date,
                    revocation_date, revocation_type, revocation_reason, ownership_type, offer_type, offer_identifier,
                    offer_discount_type, is_upgraded, price_milliunits, currency, signed_date, payload_hash)
                SELECT \(t?.environment), \(t?.transactionID), \(t?.originalTransactionID), \(r?.webOrderLineItemID),
                       \(t?.appAccountToken), \(user), \(t?.productID), \(t?.transactionReason), \(t?.purchaseDate),
                       \(t?.originalPurchaseDate), \(t?.expiresDate), \(t?.revocationDate), \(r?.revocationType),
                       \(r?.revocationReason), \(t?.ownershipType), \(t?.offerType), \(r?.offerIdentifier),
                       \(t?.offerDiscountType), \(t?.isUpgraded), \(r?.price), \(r?.currency), \(t?.signedDate),
                       \(r?.payloadHash)
                 WHERE \(t != nil)
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
                SELECT \(renewal?.environment), \(renewal?.originalTransactionID), \(renewal?.productID),
                       \(renewal?.autoRenewProductID), \(renewal?.autoRenewEnabled), \(renewal?.isInBillingRetryPeriod),
                       \(renewal?.gracePeriodExpiresDate), \(renewal?.expirationIntent), \(renewal?.priceIncreaseStatus),
                       \(renewal?.renewalDate), \(renewal?.signedDate)
                 WHERE \(renewal != nil)
                ON CONFLICT (environment, original_transaction_id) DO UPDATE SET
                    product_id = EXCLUDED.product_id, auto_renew_product_id = EXCLUDED.auto_renew_product_id,
                    auto_renew_enabled = EXCLUDED.auto_renew_enabled, is_in_billing_retry = EXCLUDED.is_in_billing_retry,
                    grace_period_expires_at = EXCLUDED.grace_period_expires_at,
                    expiration_intent = EXCLUDED.expiration_intent,
                    price_increase_status = EXCLUDED.price_increase_status, renewal_date = EXCLUDED.renewal_date,
                    signed_date = EXCLUDED.signed_date, updated_at = now()
                RETURNING 1
            ), linked_order AS (
                UPDATE payment_order
                   SET status = 'FULFILLED', transaction_id = \(order?.order.transactionID),
                       original_transaction_id = \(order?.originalTransactionID), environment = \(order?.environment),
                       amount_milliunits = \(orderFacts?.price), currency = \(orderFacts?.currency), failure_code = NULL,
                       updated_at = now()
                 WHERE order_no = \(order?.isNew == false ? order?.order.orderNo : nil)
                RETURNING 1
            ), new_order AS (
                INSERT INTO payment_order (
                    order_no, user_id, product_id, subscription_group_id, order_type, status, transaction_id,
                    original_transaction_id, environment, amount_milliunits, currency, app_account_token)
                SELECT \(order?.order.orderNo), \(user), \(order?.order.productID), \(order?.subscriptionGroupID),
                       \(order?.order.type.rawValue),
                       'FULFILLED', \(order?.order.transactionID), \(order?.originalTransactionID), \(order?.environment),
                       \(orderFacts?.price), \(orderFacts?.currency), \(orderFacts?.appAccountTokenUUID)
                 WHERE \(order?.isNew == true)
                ON CONFLICT DO NOTHING
                RETURNING 1
            ), subscription AS (
                INSERT INTO user_subscription (
                    environment, original_transaction_id, user_id, subscription_group_id, active_product_id,
                    pending_product_id, status, auto_renew_enabled, expires_at, grace_expires_at, last_transaction_id,
                    last_signed_date, is_family_shared)
                SELECT \(state?.environment), \(state?.originalTransactionID), \(user),
                       \(plan.subscription?.subscriptionGroupID), \(state?.activeProductID), \(state?.pendingProductID),
                       \(state?.status.rawValue), \(state?.autoRenewEnabled), \(state?.expiresAt), \(state?.graceExpiresAt),
                       \(state?.lastTransactionID), \(state?.lastSignedDate), \(state?.isFamilyShared)
                 WHERE \(state != nil)
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
                SELECT h.entity, h.key, h.previous, h.current, \(verified.source.cause), \(event.kind.rawValue), \(event.id)
                  FROM unnest(\(PostgresArray(plan.history.map(\.entity.rawValue)))::text[],
                              \(PostgresArray(plan.history.map(\.key)))::text[],
                              \(PostgresArray(plan.history.map(\.previous)))::text[],
                              \(PostgresArray(plan.history.map(\.current)))::text[]) AS h(entity, key, previous, current)
                RETURNING 1
            ), done AS (
                UPDATE \(sql: table)
                   SET process_status = 'SUCCEEDED', processed_at = now(), lease_owner = NULL, lease_expires_at = NULL,
                       error_code = NULL, error_message = NULL, updated_at = now()
                 WHERE id = \(event.id)
                RETURNING id
            ), proof AS (
                INSERT INTO processed_event (event_kind, event_id, worker_id, attempt)
                SELECT \(event.kind.rawValue), id, \(owner), \(event.retryCount + 1) FROM done
                RETURNING 1
            )
            SELECT (SELECT count(*) FROM proof) AS completed
            """)
        guard try rows.first!.decode("completed", as: Int.self) == 1 else {
            // Cannot happen under the row lock taken at the start; rolled back and retried if it does.
            throw ProcessingFailure.retryable(code: "FULFILLMENT_FAILED", message: "the leased event row was not completed")
        }
        let granted = try await CreditLedger.grant(
            grants.compactMap { decision in
                user.map {
                    CreditGrant(
                        userID: $0, decision: decision, environment: fact?.environment, transactionID: fact?.transactionID,
                        originalTransactionID: fact?.originalTransactionID)
                }
            }, on: db)
        for grant in plan.revocations { try await CreditLedger.revoke(grantKey: grant.grantKey, on: db) }
        for grant in plan.restorations { try await CreditLedger.restore(grantKey: grant.grantKey, on: db) }
        return granted
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
    private func freeze(_ chain: (String, String), on db: PostgresConnection) async throws {
        try await db.query(
            """
            UPDATE user_subscription SET frozen_reason = 'ACCOUNT_CONFLICT', updated_at = now()
             WHERE environment = \(chain.0) AND original_transaction_id = \(chain.1) AND frozen_reason IS NULL
            """)
    }
}
