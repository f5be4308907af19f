import Domain
import Foundation
import Postgres
import Storage

extension FulfillmentStore {
    /// The statuses of an open order (`OrderStatus.created`, `.pending`) as the literal list the
    /// partial index `payment_order_open_idx` is declared with, so a plan can use it.
    static let openOrderStatuses: StaticString = "('CREATED', 'PENDING')"

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
            'revocationPercentage', t.revocation_percentage,
            'isUpgraded', t.is_upgraded, 'ownershipType', t.ownership_type, 'offerType', t.offer_type,
            'offerDiscountType', t.offer_discount_type, 'offerPeriod', t.offer_period,
            'transactionReason', t.transaction_reason,
            'appAccountToken', t.app_account_token, 'signedDate', (extract(epoch FROM t.signed_date) * 1000)::bigint,
            -- The commitment decides when a stored charge's period is the plan's end; a billing plan
            -- type Apple adds later is stored as signed but left out (its rules are not known here).
            'commitment', CASE WHEN t.billing_plan_type IN ('MONTHLY', 'BILLED_UPFRONT') THEN json_build_object(
                'billingPlan', t.billing_plan_type, 'billingPeriodNumber', t.commitment_billing_period,
                'totalBillingPeriods', t.commitment_total_periods,
                'expiresDate', (extract(epoch FROM t.commitment_expires_date) * 1000)::bigint,
                'price', t.commitment_price_milliunits) END)
        """
    static let renewalJSON: StaticString = """
        json_build_object(
            'environment', r.environment, 'originalTransactionID', r.original_transaction_id,
            'productID', r.product_id, 'autoRenewProductID', r.auto_renew_product_id,
            'autoRenewEnabled', r.auto_renew_enabled, 'isInBillingRetryPeriod', r.is_in_billing_retry,
            'gracePeriodExpiresDate', (extract(epoch FROM r.grace_period_expires_at) * 1000)::bigint,
            'expirationIntent', r.expiration_intent, 'priceIncreaseStatus', r.price_increase_status,
            'renewalDate', (extract(epoch FROM r.renewal_date) * 1000)::bigint,
            'renewalPrice', r.renewal_price, 'renewalCurrency', r.renewal_currency,
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
            'lastSignedDate', (extract(epoch FROM s.last_signed_date) * 1000)::bigint, 'isFamilyShared', s.is_family_shared,
            'inBillingRetry', s.in_billing_retry, 'nextChangeAt', (extract(epoch FROM s.next_change_at) * 1000)::bigint,
            'commitmentEndsAt', (extract(epoch FROM s.commitment_ends_at) * 1000)::bigint)
        """

    static let orderJSON: StaticString = """
        json_build_object('orderNo', o.order_no, 'userID', o.user_id, 'productID', o.product_id,
            'type', o.order_type, 'status', o.status, 'transactionID', o.transaction_id,
            'createdAt', (extract(epoch FROM o.created_at) * 1000)::bigint)
        """

    /// Everything the rules read, in one query returning one JSON document per event (in order).
    func load(_ batch: [PendingEvent], on db: PostgresConnection) async throws -> [FulfillmentInput] {
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
              'binding', (SELECT json_build_object(
                            'userID', b.user_id, 'overridesTokens', b.source = \(BindingSource.resolution.rawValue),
                            'isTestUser', coalesce((SELECT is_test_user FROM app_user WHERE user_id = b.user_id), false))
                            FROM chain_binding b
                           WHERE b.environment = e.environment AND b.original_transaction_id = e.original),
              'submitterUser', (SELECT json_build_object('userID', u.user_id, 'isTestUser', u.is_test_user)
                                  FROM app_user u WHERE u.user_id = e.submitter),
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
                              'familySharedGrantsCredits', family_shared_grants_credits,
                              'freePeriodGrantsCredits', json_strip_nulls(json_build_object(
                                  '2', promotional_free_grants_credits, '3', offer_code_free_grants_credits,
                                  '4', win_back_free_grants_credits)),
                              'billingRetrySpendsCredits', billing_retry_spends_credits,
                              'kind', kind, 'permanentCredits', permanent_credits,
                              -- What the product unlocks: its plan code where the catalogue names nothing.
                              'entitlements', to_json(coalesce(entitlements, ARRAY[plan_code]))))
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
                                WHERE t.app_account_token = e.token AND o.status IN \(sql: Self.openOrderStatuses)
                                  AND o.product_id = e.product_id
                                  FOR UPDATE OF o) AS open),
              'grants', (SELECT json_agg(json_build_object(
                           'grantKey', grant_key, 'userID', user_id, 'pool', pool, 'amount', amount,
                           'remaining', remaining, 'revoked', revoked, 'revokedAmount', revoked_amount,
                           'unrecoverableAmount', unrecoverable_amount, 'clearedAmount', cleared_amount,
                           'clearedBy', cleared_by))
                           FROM credit_grant WHERE environment = e.environment AND transaction_id = e.transaction_id),
              'chainGrants', (SELECT json_object_agg(grant_key, amount) FROM credit_grant
                               WHERE environment = e.environment AND original_transaction_id = e.original
                                 AND grant_key LIKE 'period:%')
            ) AS loaded
              FROM unnest(\(PostgresArray(chains.map { $0?.0 }))::text[], \(PostgresArray(chains.map { $0?.1 }))::text[],
                          \(PostgresArray(batch.map { $0.verified.transaction?.appAccountTokenUUID }))::uuid[],
                          \(PostgresArray(facts.map { $0?.transactionID }))::text[],
                          \(PostgresArray(facts.map { $0?.productID }))::text[],
                          \(PostgresArray(batch.map { $0.verified.renewal?.productID }))::text[],
                          \(PostgresArray(batch.map { $0.verified.renewal?.autoRenewProductID }))::text[],
                          \(PostgresArray(orders))::text[],
                          \(PostgresArray(batch.map { $0.verified.source.submitter }))::text[])
                   WITH ORDINALITY AS e(environment, original, token, transaction_id, product_id, renewal_product_id,
                                        auto_renew_product_id, order_no, submitter, position)
             ORDER BY e.position
            """)
        guard rows.count == batch.count else {
            throw ProcessingFailure.retryable(
                code: "FULFILLMENT_FAILED", message: "the load returned \(rows.count) of \(batch.count) events")
        }
        var inputs: [FulfillmentInput] = []
        for (pending, row) in zip(batch, rows) {
            let json: String = try row.decode("loaded")
            let loaded = try Self.decode(Loaded.self, json: json)
            var stored = ChainFacts()
            for fact in loaded.transactions ?? [] { stored.record(fact) }
            if let renewal = loaded.renewal { stored.record(renewal) }
            var input = FulfillmentInput(
                source: pending.verified.source, transaction: pending.verified.transaction?.fact,
                renewal: pending.verified.renewal, tokenUser: loaded.tokenUser, binding: loaded.binding,
                submitterUser: loaded.submitterUser, subscription: loaded.subscription,
                catalogue: Dictionary((loaded.catalogue ?? []).map { ($0.productID, $0) }) { first, _ in first },
                stored: stored, transactionOwner: loaded.transactionOwner, linkedOrder: loaded.linkedOrder,
                submittedOrder: loaded.submittedOrder, openOrders: loaded.openOrders ?? [], grants: loaded.grants ?? [],
                chainGrants: loaded.chainGrants ?? [:], everyoneIsTestUser: everyoneIsTestUser, now: pending.now)
            // Only for a fact nothing else attributes (rare), so the hot path keeps its one query.
            input.appTransactionLookedUp = pending.verified.transaction?.appTransactionLookedUp ?? false
            if let account = pending.verified.transaction?.appTransactionID, let fact = input.transaction,
                input.tokenUser == nil, input.subscription == nil, input.binding == nil
            {
                input.appTransactionUsers = try await ChainBindingStore.appTransactionUsers(
                    environment: fact.environment, appTransactionID: account, on: db)
            }
            inputs.append(input)
        }
        return inputs
    }

    private struct Loaded: Decodable {
        var tokenUser: UserRecord?
        var binding: ChainBindingRecord?
        var submitterUser: UserRecord?
        var subscription: SubscriptionRecord?
        var transactions: [TransactionFact]?
        var transactionOwner: String?
        var renewal: RenewalFact?
        var catalogue: [CatalogueProduct]?
        var linkedOrder: OrderRecord?
        var submittedOrder: OrderRecord?
        var openOrders: [OrderRecord]?
        var grants: [GrantRecord]?
        var chainGrants: [String: MicroCredits]?
    }

    /// Every stored chain (or those of `environment`) with its facts, for `ChainReplay`: one query,
    /// meant for checks and tools, not for the hot path.
    static func storedChains(pool: PostgresPool, environment: String?) async throws -> [StoredChain] {
        let rows = try await pool.query(
            """
            SELECT json_build_object(
                'state', \(sql: Self.stateJSON),
                'transactions', (SELECT json_agg(\(sql: Self.transactionJSON)) FROM apple_transaction t
                                  WHERE t.environment = s.environment
                                    AND t.original_transaction_id = s.original_transaction_id),
                'renewal', (SELECT \(sql: Self.renewalJSON) FROM apple_renewal_info r
                             WHERE r.environment = s.environment AND r.original_transaction_id = s.original_transaction_id)
            ) AS chain
              FROM user_subscription s
             WHERE \(environment)::text IS NULL OR s.environment = \(environment)
            """)
        return try rows.map { try Self.decode(StoredChain.self, json: try $0.decode("chain")) }
    }

    /// A subscription row with the facts it should be a function of.
    struct StoredChain: Decodable {
        var state: SubscriptionState
        var transactions: [TransactionFact]?
        var renewal: RenewalFact?
    }
}
