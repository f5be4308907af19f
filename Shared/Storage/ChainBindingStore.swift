import Domain
import Events
import Foundation
import Postgres

/// Why a chain is bound to a user (`chain_binding.source`).
public enum BindingSource: String, Sendable, StoredStatus, Codable {
    /// An operator attributed an unowned chain (`subsctl chain attribute`, the admin API).
    case `operator` = "OPERATOR"
    /// An operator resolved an account conflict in favour of one user: outranks the facts' tokens.
    case resolution = "RESOLUTION"
    /// The user imported the chain (restore, migration).
    case `import` = "IMPORT"
    /// A family member uploaded their shared access.
    case family = "FAMILY"
}

/// Where Apple's Set App Account Token of a bound chain stands (`chain_binding.apple_token_status`).
public enum AppleTokenStatus: String, Sendable, StoredStatus, Codable {
    /// A task asks Apple (it waits for a worker with the App Store Server API key).
    case pending = "PENDING"
    case set = "SET"
    /// Apple refuses to set a token on a family-shared transaction.
    case familyNotSupported = "FAMILY_NOT_SUPPORTED"
    case failed = "FAILED"
}

/// A chain's binding as operators see it after an action.
public struct ChainBinding: Sendable, Codable, Equatable {
    public var environment: String
    public var originalTransactionId: String
    public var userId: String
    public var source: BindingSource
    public var appleTokenStatus: AppleTokenStatus?
    public var appleTokenTaskId: Int64?
}

/// What an attribution or a resolution did.
public struct ChainActionResult: Sendable, Codable, Equatable {
    public var binding: ChainBinding
    /// DEAD events of the chain put back for processing.
    public var replayedEvents: Int
    /// False when the chain was already bound to this user (nothing new but the replay).
    public var changed: Bool
}

/// Why an operator's chain action was refused; `code` is the stable error code.
public struct ChainActionRefusal: Error, Sendable, CustomStringConvertible {
    public enum Code: String, Sendable {
        /// The chain belongs to another user (its subscription, a binding, a transaction or a token says so).
        case accountConflict = "ACCOUNT_CONFLICT"
        /// Unfreezing a chain that is not frozen by an account conflict.
        case notFrozen = "CHAIN_NOT_FROZEN"
        /// No event, fact or subscription names this original transaction id.
        case notFound = "CHAIN_NOT_FOUND"
        /// The id is known in both environments: the operator must say which.
        case environmentAmbiguous = "ENVIRONMENT_AMBIGUOUS"
    }
    public let code: Code
    public let message: String
    public var description: String { "\(code.rawValue): \(message)" }
}

/// The SQL of `chain_binding`: who owns a chain whose facts do not say, the operators' attribution
/// and conflict resolution (each with its audit row, the replay of the chain's waiting facts and
/// the Set App Account Token task, in one transaction under the chain's lock), and the outcome of
/// that task.
public struct ChainBindingStore: Sendable {
    public let pool: PostgresPool
    /// The event topic: replayed events are queued on it at once (nil: the sweeper re-publishes them).
    public let topic: String?

    public init(pool: PostgresPool, topic: String?) {
        self.pool = pool
        self.topic = topic
    }

    /// The owner of the events a resolution replays; each replay names `topic` itself (nil: none is
    /// queued), so the event store's own topic is never used here.
    private var events: EventStore { EventStore(pool: pool, topic: topic ?? "") }

    /// Binds an unowned chain to `userID`, asks Apple to set the user's token on it, and replays its
    /// `UNMATCHED_ACCOUNT` facts (grants stay exactly once: they are keyed). A chain that any fact,
    /// subscription or binding gives to another user is refused with `ACCOUNT_CONFLICT`.
    /// `environment` nil: the one environment the id is known in.
    public func attribute(
        environment: String?, originalTransactionID: String, userID: String, operator operatorName: String, reason: String
    ) async throws -> ChainActionResult {
        try await pool.transaction { db in
            let environment = try await Self.resolveEnvironment(environment, originalTransactionID, on: db)
            try await Self.lockChain(environment, originalTransactionID, on: db)
            let before = try await Self.binding(environment, originalTransactionID, on: db)
            let owners = try await Self.claimants(environment, originalTransactionID, on: db)
            if owners.contains(where: { $0 != userID }) {
                throw ChainActionRefusal(
                    code: .accountConflict, message: "the chain belongs to another user; resolve it with chain unfreeze")
            }
            try await UserStore.ensureUser(userID, on: db)
            try await UserStore.ensureAccountToken(userID, on: db)
            let changed = before == nil
            if changed {
                try await Self.bind(
                    environment, originalTransactionID, userID: userID, source: .operator, by: operatorName, on: db)
                try await requestAppleToken(environment, originalTransactionID, reason: reason, by: operatorName, on: db)
            }
            let replayed = try await events.replayDead(
                environment: environment, originalTransactionID: originalTransactionID, codes: ["UNMATCHED_ACCOUNT"],
                topic: topic, on: db)
            let after = try await Self.binding(environment, originalTransactionID, on: db)!
            let result = ChainActionResult(binding: after, replayedEvents: replayed, changed: changed)
            try await AuditLog(pool: pool).record(
                on: db, operator: operatorName, action: "CHAIN_ATTRIBUTED", reason: reason, before: before, after: result)
            return result
        }
    }

    /// Resolves a chain frozen by an account conflict in favour of `ownerUserID`: the chain, its
    /// transactions and its binding are theirs from now on (also over the facts' tokens), Apple is
    /// asked to set their token, and the facts the freeze refused are replayed. Grants written for
    /// the previous owner before the conflict stay theirs.
    public func unfreeze(
        environment: String?, originalTransactionID: String, ownerUserID: String, operator operatorName: String,
        reason: String
    ) async throws -> ChainActionResult {
        try await pool.transaction { db in
            let environment = try await Self.resolveEnvironment(environment, originalTransactionID, on: db)
            try await Self.lockChain(environment, originalTransactionID, on: db)
            guard
                let frozen = try await db.query(
                    """
                    SELECT user_id, frozen_reason FROM user_subscription
                     WHERE environment = \(environment) AND original_transaction_id = \(originalTransactionID) FOR UPDATE
                    """
                ).first, try frozen.decode("frozen_reason", as: String?.self) == "ACCOUNT_CONFLICT"
            else {
                throw ChainActionRefusal(code: .notFrozen, message: "the chain is not frozen by an account conflict")
            }
            struct Before: Encodable, Sendable {
                var subscriptionOwner: String
                var frozenReason: String
                var binding: ChainBinding?
            }
            let before = Before(
                subscriptionOwner: try frozen.decode("user_id"), frozenReason: "ACCOUNT_CONFLICT",
                binding: try await Self.binding(environment, originalTransactionID, on: db))
            try await UserStore.ensureUser(ownerUserID, on: db)
            try await UserStore.ensureAccountToken(ownerUserID, on: db)
            try await Self.bind(
                environment, originalTransactionID, userID: ownerUserID, source: .resolution, by: operatorName, on: db)
            try await db.query(
                """
                WITH chain AS (
                    UPDATE user_subscription SET user_id = \(ownerUserID), frozen_reason = NULL, version = version + 1,
                           updated_at = now()
                     WHERE environment = \(environment) AND original_transaction_id = \(originalTransactionID)
                )
                UPDATE apple_transaction SET user_id = \(ownerUserID), updated_at = now()
                 WHERE environment = \(environment) AND original_transaction_id = \(originalTransactionID)
                """)
            try await requestAppleToken(environment, originalTransactionID, reason: reason, by: operatorName, on: db)
            // Apple's facts the freeze or the conflict refused are paid events: replayed, they are
            // the owner's now. Another user's upload for an order of theirs stays refused.
            let replayed =
                try await events.replayDead(
                    environment: environment, originalTransactionID: originalTransactionID,
                    codes: ["CHAIN_FROZEN", "UNMATCHED_ACCOUNT"], topic: topic, on: db)
                + events.replayDead(
                    environment: environment, originalTransactionID: originalTransactionID, codes: ["ACCOUNT_CONFLICT"],
                    onlyKind: .notification, topic: topic, on: db)
            let result = ChainActionResult(
                binding: try await Self.binding(environment, originalTransactionID, on: db)!, replayedEvents: replayed,
                changed: true)
            try await AuditLog(pool: pool).record(
                on: db, operator: operatorName, action: "CHAIN_UNFROZEN", reason: reason, before: before, after: result)
            return result
        }
    }

    /// The one environment a chain id is known in (refused with `CHAIN_NOT_FOUND` or
    /// `ENVIRONMENT_AMBIGUOUS`), for actions whose caller did not name one.
    public func environment(ofChain originalTransactionID: String) async throws -> String {
        try await pool.withConnection { try await Self.resolveEnvironment(nil, originalTransactionID, on: $0) }
    }

    /// Binds a chain a user imports to them, unless something already gives it to another user (its
    /// subscription row, binding, stored transactions or waiting facts, or `tokens`, the tokens on
    /// the transactions Apple just returned): then nothing is bound and false is returned. A chain
    /// that is the user's already needs nothing. A new binding asks Apple to set the user's token.
    public func bindImported(environment: String, originalTransactionID: String, userID: String, tokens: [UUID]) async throws
        -> Bool
    {
        try await pool.transaction { db in
            try await Self.lockChain(environment, originalTransactionID, on: db)
            var owners = try await Self.claimants(environment, originalTransactionID, on: db)
            let tokenOwners: [String] = try await db.query(
                "SELECT user_id FROM user_account_token WHERE app_account_token = ANY(\(PostgresArray(tokens))::uuid[])"
            ).map { try $0.decode("user_id") }
            owners.formUnion(tokenOwners)
            if owners.contains(where: { $0 != userID }) { return false }
            guard owners.isEmpty else { return true }
            try await UserStore.ensureUser(userID, on: db)
            try await UserStore.ensureAccountToken(userID, on: db)
            try await Self.bind(environment, originalTransactionID, userID: userID, source: .import, by: userID, on: db)
            try await requestAppleToken(environment, originalTransactionID, reason: "import", by: userID, on: db)
            return true
        }
    }

    /// The chain's binding, or nil.
    public func binding(environment: String, originalTransactionID: String) async throws -> ChainBinding? {
        try await pool.withConnection { try await Self.binding(environment, originalTransactionID, on: $0) }
    }

    /// The user and account token Set App Account Token must send for a bound chain; nil when the
    /// chain is not bound (the task then has nothing to do).
    public func tokenToSet(environment: String, originalTransactionID: String) async throws -> (userID: String, token: UUID)? {
        guard
            let row = try await pool.query(
                """
                SELECT b.user_id, t.app_account_token::text AS token
                  FROM chain_binding b JOIN user_account_token t ON t.user_id = b.user_id
                 WHERE b.environment = \(environment) AND b.original_transaction_id = \(originalTransactionID)
                """
            ).first, let token = UUID(uuidString: try row.decode("token"))
        else { return nil }
        return (try row.decode("user_id"), token)
    }

    /// Keeps what Apple answered the chain's Set App Account Token.
    public func recordAppleToken(_ status: AppleTokenStatus, environment: String, originalTransactionID: String)
        async throws
    {
        try await pool.query(
            """
            UPDATE chain_binding SET apple_token_status = \(status), updated_at = now()
             WHERE environment = \(environment) AND original_transaction_id = \(originalTransactionID)
            """)
    }

    // MARK: Statements inside a caller's transaction

    /// Binds a family member's shared access to them (the first binding stands) and replays the
    /// chain's facts that waited for an owner, in the worker's transaction under the chain lock.
    /// Apple is not asked for a token: it refuses one on family transactions.
    public func bindFamilyMember(_ userID: String, environment: String, originalTransactionID: String, on db: PostgresConnection)
        async throws
    {
        try await UserStore.ensureUser(userID, on: db)
        try await db.query(
            """
            INSERT INTO chain_binding (environment, original_transaction_id, user_id, source, created_by)
            VALUES (\(environment), \(originalTransactionID), \(userID), \(BindingSource.family), \(userID))
            ON CONFLICT (environment, original_transaction_id) DO NOTHING
            """)
        _ = try await events.replayDead(
            environment: environment, originalTransactionID: originalTransactionID, codes: ["UNMATCHED_ACCOUNT"], topic: topic,
            on: db)
    }

    // MARK: - The fulfillment statement's parts (one statement per batch of events, for speed)

    /// A verified transaction to store, with the columns Apple signed beside the fact.
    public struct StoredTransaction: Sendable {
        public var fact: TransactionFact
        public var webOrderLineItemID: String?
        public var revocationType: String?
        public var revocationReason: Int32?
        public var offerIdentifier: String?
        public var price: Int64?
        public var currency: String?
        public var payloadHash: String?
        public var user: String?
        /// The Apple Account's id for this app (Apple signs it since iOS 18.4): what RESCIND_CONSENT names.
        public var appTransactionID: String?

        public init(
            fact: TransactionFact, webOrderLineItemID: String?, revocationType: String?, revocationReason: Int32?,
            offerIdentifier: String?, price: Int64?, currency: String?, payloadHash: String?, user: String?,
            appTransactionID: String? = nil
        ) {
            self.appTransactionID = appTransactionID
            self.fact = fact
            self.webOrderLineItemID = webOrderLineItemID
            self.revocationType = revocationType
            self.revocationReason = revocationReason
            self.offerIdentifier = offerIdentifier
            self.price = price
            self.currency = currency
            self.payloadHash = payloadHash
            self.user = user
        }
    }

    /// A chain's projection to store, with its owner and subscription group.
    public struct StoredProjection: Sendable {
        public var state: SubscriptionState
        public var user: String?
        public var group: String?

        public init(state: SubscriptionState, user: String?, group: String?) {
            self.state = state
            self.user = user
            self.group = group
        }
    }

    /// Upserts the chains' transactions; the first attribution stays.
    public static func storeTransactions(_ t: [StoredTransaction]) -> PostgresQuery {
        let insert = BatchInsert(
            into: "apple_transaction",
            [
                .init("environment", "text[]", t.map(\.fact.environment), onConflict: .keep),
                .init("transaction_id", "text[]", t.map(\.fact.transactionID), onConflict: .keep),
                .init("original_transaction_id", "text[]", t.map(\.fact.originalTransactionID), onConflict: .keep),
                .init("web_order_line_item_id", "text[]", t.map(\.webOrderLineItemID)),
                .init("app_account_token", "text[]", t.map(\.fact.appAccountToken), onConflict: .keep),
                // The first attribution stays: a later fact never moves a transaction to another user.
                .init("user_id", "text[]", t.map(\.user), onConflict: .set("coalesce(apple_transaction.user_id, EXCLUDED.user_id)")),
                .init("product_id", "text[]", t.map(\.fact.productID)),
                .init("transaction_reason", "text[]", t.map(\.fact.transactionReason)),
                .init("purchase_date", "timestamptz[]", t.map(\.fact.purchaseDate)),
                .init("original_purchase_date", "timestamptz[]", t.map(\.fact.originalPurchaseDate)),
                .init("expires_date", "timestamptz[]", t.map(\.fact.expiresDate)),
                .init("revocation_date", "timestamptz[]", t.map(\.fact.revocationDate)),
                .init("revocation_type", "text[]", t.map(\.revocationType)),
                .init("revocation_reason", "integer[]", t.map(\.revocationReason)),
                .init("revocation_percentage", "integer[]", t.map(\.fact.revocationPercentage)),
                .init("ownership_type", "text[]", t.map(\.fact.ownershipType)),
                .init("offer_type", "integer[]", t.map(\.fact.offerType)),
                .init("offer_identifier", "text[]", t.map(\.offerIdentifier)),
                .init("offer_discount_type", "text[]", t.map(\.fact.offerDiscountType)),
                .init("offer_period", "text[]", t.map(\.fact.offerPeriod)),
                .init("is_upgraded", "boolean[]", t.map(\.fact.isUpgraded)),
                .init("price_milliunits", "bigint[]", t.map(\.price)),
                .init("currency", "text[]", t.map(\.currency)),
                .init("signed_date", "timestamptz[]", t.map(\.fact.signedDate)),
                .init("payload_hash", "text[]", t.map(\.payloadHash)),
                // A version signed without it (an older client's upload) does not forget the Account.
                .init(
                    "app_transaction_id", "text[]", t.map(\.appTransactionID),
                    onConflict: .set("coalesce(EXCLUDED.app_transaction_id, apple_transaction.app_transaction_id)")),
                .init("billing_plan_type", "text[]", t.map(\.fact.commitment?.billingPlan.rawValue)),
                .init("commitment_billing_period", "integer[]", t.map(\.fact.commitment?.billingPeriodNumber)),
                .init("commitment_total_periods", "integer[]", t.map(\.fact.commitment?.totalBillingPeriods)),
                .init("commitment_expires_date", "timestamptz[]", t.map(\.fact.commitment?.expiresDate)),
                .init("commitment_price_milliunits", "bigint[]", t.map(\.fact.commitment?.price)),
            ], conflict: .update(target: "(environment, transaction_id)", also: "updated_at = now()"))
        return "\(insert)"
    }

    /// Upserts the chains' renewal infos.
    public static func storeRenewals(_ r: [RenewalFact]) -> PostgresQuery {
        let insert = BatchInsert(
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
                .init("renewal_billing_plan_type", "text[]", r.map(\.commitment?.billingPlan?.rawValue)),
                .init("commitment_auto_renew_product_id", "text[]", r.map(\.commitment?.autoRenewProductID)),
                .init("commitment_auto_renew_enabled", "boolean[]", r.map(\.commitment?.autoRenewEnabled)),
                .init("commitment_renewal_billing_plan_type", "text[]", r.map(\.commitment?.renewalBillingPlan?.rawValue)),
                .init("commitment_renewal_date", "timestamptz[]", r.map(\.commitment?.renewalDate)),
                .init("commitment_renewal_price_milliunits", "bigint[]", r.map(\.commitment?.renewalPrice)),
            ], conflict: .update(target: "(environment, original_transaction_id)", also: "updated_at = now()"))
        return "\(insert)"
    }

    /// Upserts the chains' projections; the owner is the first attribution (a conflict freezes the
    /// chain instead).
    public static func storeProjections(_ s: [StoredProjection]) -> PostgresQuery {
        let insert = BatchInsert(
            into: "user_subscription",
            [
                .init("environment", "text[]", s.map(\.state.environment), onConflict: .keep),
                .init("original_transaction_id", "text[]", s.map(\.state.originalTransactionID), onConflict: .keep),
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
                .init("in_billing_retry", "boolean[]", s.map(\.state.inBillingRetry)),
                .init("next_change_at", "timestamptz[]", s.map(\.state.nextChangeAt)),
                .init("commitment_ends_at", "timestamptz[]", s.map(\.state.commitmentEndsAt)),
            ],
            conflict: .update(
                target: "(environment, original_transaction_id)",
                also: "version = user_subscription.version + 1, updated_at = now()"))
        return "\(insert)"
    }

    // MARK: - Chain state outside the fulfillment statement

    /// Nothing moves on a chain with an account conflict until an operator clears it (`unfreeze`):
    /// in the worker's transaction, under the chain's lock.
    public func freeze(environment: String, originalTransactionID: String, on db: PostgresConnection) async throws {
        try await db.query(
            """
            UPDATE user_subscription SET frozen_reason = 'ACCOUNT_CONFLICT', updated_at = now()
             WHERE environment = \(environment) AND original_transaction_id = \(originalTransactionID)
               AND frozen_reason IS NULL
            """)
    }

    /// Marks each chain's ending (`last transaction:status`) as cleared by the credit jobs, unless
    /// the chain moved on since: the expiry clearing's search reads an index of the unmarked
    /// endings only.
    public func markEndingsCleared(
        environments: [String], originals: [String], lasts: [String], statuses: [String], on db: PostgresConnection
    ) async throws {
        try await db.query(
            """
            UPDATE user_subscription s SET cleared_ending = h.last || ':' || h.status
              FROM unnest(\(PostgresArray(environments))::text[], \(PostgresArray(originals))::text[],
                          \(PostgresArray(lasts))::text[], \(PostgresArray(statuses))::text[])
                   AS h(environment, original, last, status)
             WHERE s.environment = h.environment AND s.original_transaction_id = h.original
               AND s.last_transaction_id = h.last AND s.status = h.status
            """)
    }

    /// The chain lock every writer of a chain takes (the workers' apply included).
    static func lockChain(_ environment: String, _ originalTransactionID: String, on db: PostgresConnection) async throws {
        try await db.query(
            "SELECT pg_advisory_xact_lock(hashtextextended(\(environment + "/" + originalTransactionID), 0))")
    }

    /// The one environment a chain id is known in, unless the caller named one.
    static func resolveEnvironment(_ environment: String?, _ originalTransactionID: String, on db: PostgresConnection)
        async throws -> String
    {
        if let environment { return environment }
        let known: [String] = try await db.query(
            """
            SELECT environment FROM inbound_event_key WHERE original_transaction_id = \(originalTransactionID)
            UNION SELECT environment FROM apple_transaction WHERE original_transaction_id = \(originalTransactionID)
            UNION SELECT environment FROM user_subscription WHERE original_transaction_id = \(originalTransactionID)
            """
        ).map { try $0.decode("environment") }
        switch known.count {
        case 0: throw ChainActionRefusal(code: .notFound, message: "no event or fact names this original transaction id")
        case 1: return known[0]
        default:
            throw ChainActionRefusal(
                code: .environmentAmbiguous, message: "the id is known in \(known.sorted().joined(separator: " and ")): name one")
        }
    }

    /// The users whose stored transactions of `environment` the Apple Account `appTransactionID`
    /// signed (Apple puts it on transactions since iOS 18.4): who that Account bought for here.
    public static func appTransactionUsers(environment: String, appTransactionID: String, on db: PostgresConnection)
        async throws -> [UserRecord]
    {
        try await db.query(
            """
            SELECT DISTINCT t.user_id, coalesce(u.is_test_user, false) AS is_test_user
              FROM apple_transaction t LEFT JOIN app_user u ON u.user_id = t.user_id
             WHERE t.environment = \(environment) AND t.app_transaction_id = \(appTransactionID) AND t.user_id IS NOT NULL
             ORDER BY t.user_id
            """
        ).map { UserRecord(userID: try $0.decode("user_id"), isTestUser: try $0.decode("is_test_user")) }
    }

    /// Whether anything here already gives the chain to a user (see `claimants`).
    public func isClaimed(environment: String, originalTransactionID: String) async throws -> Bool {
        try await pool.withConnection { db in
            !(try await Self.claimants(environment, originalTransactionID, on: db)).isEmpty
        }
    }

    /// Every user something already gives the chain to: its subscription row, its binding, its
    /// stored transactions, and the tokens on its facts waiting as unmatched.
    static func claimants(_ environment: String, _ originalTransactionID: String, on db: PostgresConnection) async throws
        -> Set<String>
    {
        let rows = try await db.query(
            """
            SELECT user_id FROM user_subscription
             WHERE environment = \(environment) AND original_transaction_id = \(originalTransactionID)
            UNION SELECT user_id FROM chain_binding
             WHERE environment = \(environment) AND original_transaction_id = \(originalTransactionID)
            UNION SELECT user_id FROM apple_transaction
             WHERE environment = \(environment) AND original_transaction_id = \(originalTransactionID) AND user_id IS NOT NULL
            UNION SELECT t.user_id FROM unmatched_fact f
              JOIN user_account_token t ON t.app_account_token::text = lower(f.app_account_token)
             WHERE f.environment = \(environment) AND f.original_transaction_id = \(originalTransactionID)
               AND f.replayed_at IS NULL
            """)
        return Set(try rows.map { try $0.decode("user_id") })
    }

    static func binding(_ environment: String, _ originalTransactionID: String, on db: PostgresConnection) async throws
        -> ChainBinding?
    {
        guard
            let row = try await db.query(
                """
                SELECT user_id, source, apple_token_status, apple_token_task_id FROM chain_binding
                 WHERE environment = \(environment) AND original_transaction_id = \(originalTransactionID)
                """
            ).first
        else { return nil }
        return ChainBinding(
            environment: environment, originalTransactionId: originalTransactionID, userId: try row.decode("user_id"),
            source: try row.decode("source"), appleTokenStatus: try row.decode("apple_token_status", as: AppleTokenStatus?.self),
            appleTokenTaskId: try row.decode("apple_token_task_id", as: Int64?.self))
    }

    /// Binds (or re-binds, for a resolution) the chain.
    static func bind(
        _ environment: String, _ originalTransactionID: String, userID: String, source: BindingSource, by requestedBy: String,
        on db: PostgresConnection
    ) async throws {
        try await db.query(
            """
            INSERT INTO chain_binding (environment, original_transaction_id, user_id, source, created_by)
            VALUES (\(environment), \(originalTransactionID), \(userID), \(source), \(requestedBy))
            ON CONFLICT (environment, original_transaction_id) DO UPDATE
               SET user_id = EXCLUDED.user_id, source = EXCLUDED.source, created_by = EXCLUDED.created_by,
                   apple_token_status = NULL, apple_token_task_id = NULL, updated_at = now()
            """)
    }

    /// Queues Set App Account Token for the chain and records it on the binding.
    private func requestAppleToken(
        _ environment: String, _ originalTransactionID: String, reason: String, by requestedBy: String, on db: PostgresConnection
    ) async throws {
        let task = try await TaskStore.requestSetAppAccountToken(
            environment: environment, originalTransactionID: originalTransactionID, reason: reason, requestedBy: requestedBy,
            on: db)
        try await db.query(
            """
            UPDATE chain_binding SET apple_token_status = \(AppleTokenStatus.pending), apple_token_task_id = \(task),
                   updated_at = now()
             WHERE environment = \(environment) AND original_transaction_id = \(originalTransactionID)
            """)
    }
}
