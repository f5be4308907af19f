import Foundation

/// Where a verified fact came from; decides which rows of the notification matrix apply.
public enum FactSource: Sendable, Hashable {
    /// An App Store Server Notification, with Apple's raw type and subtype.
    case notification(type: String, subtype: String?)
    /// A client's upload for one of its orders; `submitter` is the logged-in user.
    case clientSubmission(orderNo: String, submitter: String)
    /// A transaction a client observed (restore, Ask to Buy, `Transaction.updates`); no order.
    case observedSubmission(submitter: String)

    /// The cause written into status history.
    public var cause: String {
        switch self {
        case .notification(let type, let subtype): subtype.map { "apple.\(type).\($0)" } ?? "apple.\(type)"
        case .clientSubmission: "client.upload"
        case .observedSubmission: "client.observed"
        }
    }

    /// What the event asks for. A submission always carries a transaction to apply.
    public var action: NotificationAction {
        switch self {
        case .notification(let type, let subtype): NotificationMatrix.action(type: type, subtype: subtype)
        case .clientSubmission: .applyTransaction(.initial)
        case .observedSubmission: .applyTransaction(.recovery)
        }
    }

    /// The logged-in user of a submission.
    public var submitter: String? {
        switch self {
        case .notification: nil
        case .clientSubmission(_, let submitter), .observedSubmission(let submitter): submitter
        }
    }
}

/// A business user as attribution sees it.
public struct UserRecord: Sendable, Hashable, Codable {
    public var userID: String
    public var isTestUser: Bool

    public init(userID: String, isTestUser: Bool) {
        self.userID = userID
        self.isTestUser = isTestUser
    }
}

/// A chain's binding (`chain_binding`): who owns a chain whose facts do not say.
public struct ChainBindingRecord: Sendable, Hashable, Codable {
    public var userID: String
    public var isTestUser: Bool
    /// An operator's resolution of an account conflict: the chain is this user's whatever the facts' tokens say.
    public var overridesTokens: Bool

    public init(userID: String, isTestUser: Bool, overridesTokens: Bool) {
        self.userID = userID
        self.isTestUser = isTestUser
        self.overridesTokens = overridesTokens
    }

    var user: UserRecord { UserRecord(userID: userID, isTestUser: isTestUser) }
}

/// A `payment_order` row as processing reads and writes it.
public struct OrderRecord: Sendable, Hashable, Codable {
    public var orderNo: String
    public var userID: String
    public var productID: String
    public var type: OrderType
    public var status: OrderStatus
    public var transactionID: String?
    public var createdAt: Date

    public init(
        orderNo: String, userID: String, productID: String, type: OrderType, status: OrderStatus,
        transactionID: String?, createdAt: Date
    ) {
        self.orderNo = orderNo
        self.userID = userID
        self.productID = productID
        self.type = type
        self.status = status
        self.transactionID = transactionID
        self.createdAt = createdAt
    }
}

/// A `credit_grant` row: a lot. Every grant is one, and usage, refunds and clearings take from
/// the lots, so what is left of each grant is known (`remaining`); a pool's balance is the sum of
/// its lots' remaining amounts.
public struct GrantRecord: Sendable, Hashable, Codable {
    public var grantKey: String
    public var userID: String
    public var pool: CreditPool
    public var amount: MicroCredits
    /// What usage, refunds and clearings have left of the lot.
    public var remaining: MicroCredits
    /// Set by a refund, whatever it could take: a second refund takes nothing, a reversal gives back.
    public var revoked: Bool
    /// What the refund took from the lot.
    public var revokedAmount: MicroCredits
    /// The refunded share of the lot that had been spent already (recorded, never taken).
    public var unrecoverableAmount: MicroCredits
    /// What an expiry clearing took from the lot, and which ending (`CreditRules.endingKey`).
    public var clearedAmount: MicroCredits
    public var clearedBy: String?

    public init(
        grantKey: String, userID: String, pool: CreditPool, amount: MicroCredits, remaining: MicroCredits? = nil,
        revoked: Bool = false, revokedAmount: MicroCredits = 0, unrecoverableAmount: MicroCredits = 0,
        clearedAmount: MicroCredits = 0, clearedBy: String? = nil
    ) {
        self.grantKey = grantKey
        self.userID = userID
        self.pool = pool
        self.amount = amount
        self.remaining = remaining ?? amount
        self.revoked = revoked
        self.revokedAmount = revokedAmount
        self.unrecoverableAmount = unrecoverableAmount
        self.clearedAmount = clearedAmount
        self.clearedBy = clearedBy
    }
}

/// The stored `user_subscription` row of a chain.
public struct SubscriptionRecord: Sendable, Hashable, Codable {
    public var owner: UserRecord
    public var state: SubscriptionState
    /// Set by an account conflict: nothing moves on the chain until an operator clears it.
    public var frozenReason: String?

    public init(owner: UserRecord, state: SubscriptionState, frozenReason: String? = nil) {
        self.owner = owner
        self.state = state
        self.frozenReason = frozenReason
    }
}

/// Everything the rules read about one event: the verified facts it carries and what is stored.
public struct FulfillmentInput: Sendable {
    public var source: FactSource
    public var transaction: TransactionFact?
    public var renewal: RenewalFact?
    /// The user of the fact's appAccountToken (nil when there is no token or it maps to nobody).
    public var tokenUser: UserRecord?
    /// The chain's binding (operator, import, family member, resolution), if any.
    public var binding: ChainBindingRecord?
    /// The logged-in user of a submission as stored (nil when they have no row yet).
    public var submitterUser: UserRecord?
    public var subscription: SubscriptionRecord?
    /// Catalogue rows by product id (enabled or not: a disabled product was still sold).
    public var catalogue: [String: CatalogueProduct]
    /// The chain's stored facts, before this event.
    public var stored: ChainFacts
    /// `apple_transaction.user_id` of the stored version of this transaction.
    public var transactionOwner: String?
    /// The order already linked to this transaction.
    public var linkedOrder: OrderRecord?
    /// The order a client submission names.
    public var submittedOrder: OrderRecord?
    /// The token user's open orders for the transaction's product.
    public var openOrders: [OrderRecord]
    /// Grants already written for this transaction.
    public var grants: [GrantRecord]
    /// Amounts of the period grants already written for the chain's transactions, by grant key.
    public var chainGrants: [String: MicroCredits]
    /// The users whose stored transactions (same environment) carry the fact's `appTransactionId`,
    /// the Apple Account it was bought with; read only for a fact that nothing else attributes.
    public var appTransactionUsers: [UserRecord]
    /// The fact's `appTransactionId` came from Apple's Get App Transaction Info, not from the
    /// signed transaction (signed before iOS 18.4): attributed by it, the method says so.
    public var appTransactionLookedUp = false
    /// A Sandbox deployment is an isolated test tenant: everyone counts as a test user there.
    public var everyoneIsTestUser: Bool
    public var now: Date

    public init(
        source: FactSource, transaction: TransactionFact?, renewal: RenewalFact?, tokenUser: UserRecord? = nil,
        binding: ChainBindingRecord? = nil, submitterUser: UserRecord? = nil, subscription: SubscriptionRecord? = nil,
        catalogue: [String: CatalogueProduct], stored: ChainFacts = ChainFacts(),
        transactionOwner: String? = nil, linkedOrder: OrderRecord? = nil, submittedOrder: OrderRecord? = nil,
        openOrders: [OrderRecord] = [], grants: [GrantRecord] = [], chainGrants: [String: MicroCredits] = [:],
        appTransactionUsers: [UserRecord] = [], everyoneIsTestUser: Bool, now: Date
    ) {
        self.source = source
        self.transaction = transaction
        self.renewal = renewal
        self.tokenUser = tokenUser
        self.binding = binding
        self.submitterUser = submitterUser
        self.subscription = subscription
        self.catalogue = catalogue
        self.stored = stored
        self.transactionOwner = transactionOwner
        self.linkedOrder = linkedOrder
        self.submittedOrder = submittedOrder
        self.openOrders = openOrders
        self.grants = grants
        self.chainGrants = chainGrants
        self.appTransactionUsers = appTransactionUsers
        self.everyoneIsTestUser = everyoneIsTestUser
        self.now = now
    }
}

/// Why a fact could not be attributed; it is kept and replayed after the cause is fixed.
public enum UnmatchedReason: String, Sendable, Hashable {
    /// The product is not in the catalogue.
    case product = "UNMATCHED_PRODUCT"
    /// No appAccountToken, or one that maps to no user: never guess a user.
    case account = "UNMATCHED_ACCOUNT"
}

/// How an event's facts found their user; the label of `subs_attributions_total{method}`.
public enum AttributionMethod: String, Sendable, Hashable, Codable {
    /// An operator's resolution of an account conflict, over the facts' tokens.
    case resolution
    /// The signed appAccountToken.
    case token
    /// The owner of the chain's subscription row (a later fact without a token).
    case subscriptionOwner = "subscription_owner"
    /// The chain's binding (operator, import, family member).
    case binding
    /// A family member's own upload of their shared access.
    case familyMember = "family_member"
    /// The one user whose earlier purchases carry the same Apple Account (`appTransactionId`).
    case appTransaction = "app_transaction"
    /// The same, with the Apple Account asked of Apple (Get App Transaction Info) for a transaction
    /// signed without it.
    case appTransactionLookup = "app_transaction_lookup"

    /// The methods that rest on the Apple Account alone, audited with the event.
    public var byAppleAccount: Bool { self == .appTransaction || self == .appTransactionLookup }
}

/// The fate of an event.
public enum FulfillmentVerdict: Sendable, Hashable {
    /// The facts are stored and the state recomputed (a duplicate changes nothing and is applied too).
    case applied
    /// Nothing to apply by design (TEST, REFUND_DECLINED, an unknown type, no facts).
    case recorded(String)
    case unmatched(UnmatchedReason)
    /// The fact is attributed to `attributed`, but the stored transaction, the chain or the submitter is `other`.
    case accountConflict(attributed: String, other: String)
    /// A permanent refusal with its stable code (the facts are genuine but may not be used this way).
    case refused(code: String, reason: String)
}

/// An order the event completes or creates, as it must be after the event.
public struct OrderChange: Sendable, Hashable {
    public var order: OrderRecord
    public var isNew: Bool
    /// The status before the event (nil for a new order).
    public var previousStatus: OrderStatus?
    public var originalTransactionID: String
    public var environment: String
    public var subscriptionGroupID: String
}

/// An open order that a verified transaction can never complete, ended `FAILED` with its code.
/// The order stays unlinked: the transaction is another order's, or no order's, and a later
/// real charge still counts (as a RECOVERY order).
public struct OrderFailure: Sendable, Hashable {
    /// The order as it is after the event (status FAILED).
    public var order: OrderRecord
    public var previousStatus: OrderStatus
    public var code: OrderFailureCode
    public var reason: String
    /// The transaction that was refused for the order.
    public var transactionID: String
    public var environment: String
}

/// The recomputed subscription row of the chain.
public struct SubscriptionChange: Sendable, Hashable {
    public var state: SubscriptionState
    public var userID: String
    public var subscriptionGroupID: String?
    /// Nil when the row does not exist yet.
    public var previousStatus: SubscriptionStatus?
}

/// A grant for another transaction of the chain than the event's own (`FulfillmentPlan.freedGrants`).
public struct FreedGrant: Sendable, Hashable {
    public var transaction: TransactionFact
    public var decision: GrantDecision
}

/// One row of `status_history`.
public struct StatusChange: Sendable, Hashable {
    /// What changed status (`status_history.entity_type`).
    public enum Entity: String, Sendable, Hashable {
        case order = "ORDER"
        case subscription = "SUBSCRIPTION"
    }
    public var entity: Entity
    public var key: String
    public var previous: String?
    public var current: String
    public var cause: String
}

/// Everything one event writes, decided before any write. Applying it twice changes nothing more:
/// every write is keyed (transaction id, order, chain, grant key).
public struct FulfillmentPlan: Sendable, Hashable {
    public var verdict: FulfillmentVerdict
    /// The attributed user, once known.
    public var user: UserRecord?
    /// How `user` was found.
    public var attribution: AttributionMethod?
    /// Why no user was found, when the reason is more than "no token" (several candidates).
    public var unattributedReason: String?
    /// A transaction version newer than the stored one (or the first one).
    public var storeTransaction: TransactionFact?
    /// Renewal info newer than the stored one (or the first one).
    public var storeRenewal: RenewalFact?
    public var order: OrderChange?
    /// An open order the event ends FAILED (a refused upload for it, or a revoked transaction that
    /// would otherwise have completed it); written whatever the verdict.
    public var failedOrder: OrderFailure?
    /// Nil when the row would not change.
    public var subscription: SubscriptionChange?
    public var grants: [GrantDecision] = []
    /// Lots of a refunded transaction not revoked yet (`CreditRules.revoke` decides the amounts
    /// against each lot as it is when written), and the refunded share (Apple's
    /// `revocationPercentage`; nil: all).
    public var revocations: [GrantRecord] = []
    public var revocationPercentage: Int?
    /// What a refund frees for a later purchase of the same plan that arrived before it: taken then
    /// for a switch back, it was granted only what its run lacked; with the earlier period refunded
    /// it is a new purchase, granted as if the refund had come first.
    public var freedGrants: [FreedGrant] = []
    /// Lots of a transaction whose refund was reversed: what the refund took is restored.
    public var restorations: [GrantRecord] = []
    /// A reversed refund of a chain entitled again also undoes the clearing its REVOKED ending
    /// caused (`CreditRules.endingKey`), if one ran in between.
    public var restoreClearing: String?
    public var history: [StatusChange] = []
    /// An account conflict on a chain that has a row: freeze it.
    public var freezeChain = false
    /// A family member's first upload of their shared access: bind the chain to them (and replay
    /// its facts that waited for an owner).
    public var bindFamilyMember: String?
    /// The outbound events of the changes above (`FulfillmentEvents`), `now` their time; the
    /// store keeps one per key, so planning them again adds nothing.
    public var events: [OutboundEvent] = []

    /// The transaction this apply delivers (a purchase, renewal or consumable that grants, fulfils
    /// an order or moves its subscription, attributed and not revoked), which Finish Transaction
    /// reports to Apple; nil when the apply delivers nothing.
    public var deliveredTransaction: TransactionFact? {
        guard verdict == .applied, user != nil, let fact = storeTransaction, fact.revocationDate == nil,
            !grants.isEmpty || order != nil || subscription != nil
        else { return nil }
        return fact
    }

    /// True for a pure duplicate: every fact stored, every order and grant written before.
    public var writesNothing: Bool {
        storeTransaction == nil && storeRenewal == nil && order == nil && subscription == nil && grants.isEmpty
            && revocations.isEmpty && freedGrants.isEmpty && restorations.isEmpty && restoreClearing == nil && history.isEmpty
            && bindFamilyMember == nil && failedOrder == nil
    }

    init(verdict: FulfillmentVerdict, user: UserRecord? = nil) {
        self.verdict = verdict
        self.user = user
    }
}

/// The fulfillment rules of domain.md as one pure function: attribution, the Sandbox rule,
/// account conflicts, order resolution, the projection, grants, revocations and restorations.
public enum FulfillmentPlanner {
    /// How far before an order's creation an Apple purchase date may lie and still complete it
    /// (our clock and Apple's are not the same clock).
    public static let clockTolerance: TimeInterval = 120

    public static func plan(_ input: FulfillmentInput) -> FulfillmentPlan {
        let action = input.source.action
        switch action {
        case .recordOnly: return FulfillmentPlan(verdict: .recorded("record only"))
        case .unknown: return FulfillmentPlan(verdict: .recorded("unknown notification type"))
        case .consumptionRequest: return FulfillmentPlan(verdict: .recorded("consumption request"))
        // Acted on before the apply (the worker's `ConsentRescission`): no chain's facts change.
        case .rescindConsent: return FulfillmentPlan(verdict: .recorded("consent rescinded"))
        case .applyTransaction, .applyRenewalInfo, .revokeTransaction, .restoreTransaction: break
        }
        guard input.transaction != nil || input.renewal != nil else { return FulfillmentPlan(verdict: .recorded("no facts")) }
        guard let attribution = attribute(input) else { return unattributed(input) }
        let user = attribution.user
        let productID = input.transaction?.productID ?? input.renewal!.productID
        guard let product = input.catalogue[productID] else { return FulfillmentPlan(verdict: .unmatched(.product)) }
        if let refusal = gate(input, user: user) { return refused(refusal, user: user, input: input) }
        if let stop = conflicts(input, user: user) { return stop }

        var plan = FulfillmentPlan(verdict: .applied, user: user)
        plan.attribution = attribution.method
        plan.bindFamilyMember = attribution.familyMember
        let recorded = facts(input)
        plan.storeTransaction = recorded.newTransaction
        plan.storeRenewal = recorded.newRenewal
        if let refusal = credits(&plan, input: input, chain: recorded.chain) { return refused(refusal, user: user, input: input) }
        plan.subscription = projection(input, chain: recorded.chain, product: product, user: user)
        plan.history = history(order: plan.order, subscription: plan.subscription, cause: input.source.cause)
        plan.events = FulfillmentEvents.applied(plan, input: input, chain: recorded.chain)
        return plan
    }

    /// A refusal's plan: nothing written but the refusal, and, when a client's upload for its
    /// order is refused for good (`OrderFailureCode`), that order ended FAILED with `order.failed`.
    private static func refused(_ verdict: FulfillmentVerdict, user: UserRecord, input: FulfillmentInput) -> FulfillmentPlan {
        var plan = FulfillmentPlan(verdict: verdict, user: user)
        if case .refused(let code, let reason) = verdict, let permanent = OrderFailureCode(rawValue: code),
            case .clientSubmission(let orderNo, let submitter) = input.source, let order = input.submittedOrder,
            order.orderNo == orderNo, order.userID == submitter, let fact = input.transaction
        {
            plan.failedOrder = failure(
                of: order, code: permanent, reason: reason, transactionID: fact.transactionID, environment: fact.environment)
            plan.events = FulfillmentEvents.failed(plan.failedOrder, now: input.now)
        }
        return plan
    }

    /// The order ended FAILED by the refused transaction; nil when the order is final already or
    /// linked to a transaction (its own charge decides it, not this one).
    public static func failure(
        of order: OrderRecord, code: OrderFailureCode, reason: String, transactionID: String, environment: String
    ) -> OrderFailure? {
        guard order.transactionID == nil, order.status.canMove(to: .failed) else { return nil }
        var failed = order
        failed.status = .failed
        return OrderFailure(
            order: failed, previousStatus: order.status, code: code, reason: reason, transactionID: transactionID,
            environment: environment)
    }

    /// Who an event's facts belong to.
    struct Attribution: Sendable, Hashable {
        var user: UserRecord
        var method: AttributionMethod
        /// Set when the user is a family member whose upload is what binds the chain to them.
        var familyMember: String?
    }

    /// Attribution: the signed token decides; a chain attributed earlier keeps its owner when a
    /// later fact carries no token (or one this system never issued) and its binding stands in
    /// for a chain that has none. The logged-in user only ever counts for a family member's own
    /// shared access, which Apple sends without the member's token. Nil: never guess a user.
    static func attribute(_ input: FulfillmentInput) -> Attribution? {
        let token = input.transaction?.appAccountToken
        if let binding = input.binding, binding.overridesTokens { return Attribution(user: binding.user, method: .resolution) }
        if token != nil, let tokenUser = input.tokenUser { return Attribution(user: tokenUser, method: .token) }
        if token == nil, let owner = input.subscription?.owner { return Attribution(user: owner, method: .subscriptionOwner) }
        if let binding = input.binding { return Attribution(user: binding.user, method: .binding) }
        if let member = familyMemberUpload(input) {
            return Attribution(user: member, method: .familyMember, familyMember: member.userID)
        }
        return appTransactionOwner(input)
    }

    /// The attribution step by Apple Account, last because it is the weakest evidence: a
    /// transaction that neither a token nor its chain attributes goes to the one user whose earlier
    /// purchases carry the same `appTransactionId` (the same Apple Account bought them). Several
    /// such users (one Apple Account paying for two business accounts) are never chosen between.
    static func appTransactionOwner(_ input: FulfillmentInput) -> Attribution? {
        guard input.transaction != nil, input.tokenUser == nil, input.appTransactionUsers.count == 1 else { return nil }
        return Attribution(
            user: input.appTransactionUsers[0], method: input.appTransactionLookedUp ? .appTransactionLookup : .appTransaction)
    }

    /// The plan of a fact no one is attributed: kept as UNMATCHED_ACCOUNT, saying why when its
    /// Apple Account named several users.
    private static func unattributed(_ input: FulfillmentInput) -> FulfillmentPlan {
        var plan = FulfillmentPlan(verdict: .unmatched(.account))
        if input.appTransactionUsers.count > 1 {
            plan.unattributedReason =
                "its Apple Account (appTransactionId) bought for \(input.appTransactionUsers.count) users: not guessed"
        }
        return plan
    }

    /// The Sandbox rule: on a Production deployment, facts of another environment only touch test
    /// users. A non-nil result refuses the event.
    static func gate(_ input: FulfillmentInput, user: UserRecord) -> FulfillmentVerdict? {
        let environment = input.transaction?.environment ?? input.renewal!.environment
        guard environment != "Production", !input.everyoneIsTestUser, !user.isTestUser else { return nil }
        return .refused(code: "SANDBOX_REFUSED", reason: "\(environment) facts only touch test users")
    }

    /// Account conflicts and frozen chains; a non-nil result is the whole plan of the event.
    static func conflicts(_ input: FulfillmentInput, user: UserRecord) -> FulfillmentPlan? {
        // An observed upload by someone else is applied to the owner (who paid); the uploader is
        // told the purchase is another account's. An upload for an order is that user's claim.
        var claimants = [input.transactionOwner, input.subscription?.owner.userID]
        if case .clientSubmission(_, let submitter) = input.source { claimants.append(submitter) }
        if let binding = input.binding, !binding.overridesTokens { claimants.append(binding.userID) }
        if let other = claimants.lazy.compactMap({ $0 }).first(where: { $0 != user.userID }) {
            var plan = FulfillmentPlan(verdict: .accountConflict(attributed: user.userID, other: other), user: user)
            plan.freezeChain = input.subscription != nil
            plan.events = FulfillmentEvents.accountConflict(input, payer: user.userID, other: other, chainFrozen: plan.freezeChain)
            return plan
        }
        if let frozen = input.subscription?.frozenReason {
            return FulfillmentPlan(verdict: .refused(code: "CHAIN_FROZEN", reason: frozen), user: user)
        }
        return nil
    }

    /// The chain with the event's facts recorded, and those of them newer than the stored ones.
    struct RecordedFacts: Sendable, Hashable {
        var chain: ChainFacts
        /// A transaction version newer than the stored one (or the first one).
        var newTransaction: TransactionFact?
        /// Renewal info newer than the stored one (or the first one).
        var newRenewal: RenewalFact?
    }

    /// Only newer versions are stored, so a late or repeated delivery never overwrites what is known.
    static func facts(_ input: FulfillmentInput) -> RecordedFacts {
        var recorded = RecordedFacts(chain: input.stored)
        if let transaction = input.transaction {
            let stored = input.stored.transactions.first { $0.transactionID == transaction.transactionID }
            if stored.map({ transaction.isNewerVersion(than: $0) }) ?? true { recorded.newTransaction = transaction }
            recorded.chain.record(transaction)
        }
        if let renewal = input.renewal {
            if input.stored.renewal.map({ renewal.isNewer(than: $0) }) ?? true { recorded.newRenewal = renewal }
            recorded.chain.record(renewal)
        }
        return recorded
    }

    /// The order and the credit moves of the event's transaction: its order and grants when it is
    /// applied, revocations and freed grants when it is refunded, restorations when a refund is
    /// reversed. A non-nil result refuses the event.
    static func credits(_ plan: inout FulfillmentPlan, input: FulfillmentInput, chain: ChainFacts) -> FulfillmentVerdict? {
        // The stored version wins: a refund processed earlier stays a refund.
        guard let transaction = input.transaction,
            let effective = chain.transactions.first(where: { $0.transactionID == transaction.transactionID }),
            let product = input.catalogue[effective.productID]
        else { return nil }
        switch input.source.action {
        case .applyTransaction, .restoreTransaction:
            if let refusal = orderPlan(&plan, input: input, transaction: effective, product: product, chain: chain) { return refusal }
            // A restored transaction gets its grant once it has an order (now or before).
            if plan.order != nil || input.linkedOrder != nil || effective.isFamilyShared {
                plan.grants = newGrants(for: effective, product: product, input: input, chain: chain)
            }
        default: break
        }
        if effective.revocationDate != nil {
            plan.revocations = input.grants.filter { !$0.revoked }
            if !plan.revocations.isEmpty { plan.revocationPercentage = effective.revocationPercentage }
            plan.freedGrants = freedGrants(by: effective, chain: chain, catalogue: input.catalogue, granted: input.chainGrants)
        } else {
            plan.restorations = input.grants.filter(\.revoked)
            if !plan.restorations.isEmpty || input.source.action == .restoreTransaction,
                let status = SubscriptionProjection.project(chain, now: input.now)?.status,
                status == .active || status == .grace
            {
                plan.restoreClearing = CreditRules.endingKey(
                    environment: effective.environment, originalTransactionID: effective.originalTransactionID,
                    lastTransactionID: effective.transactionID, status: SubscriptionStatus.revoked.rawValue)
            }
        }
        return nil
    }

    /// The grants of an applied transaction not written yet.
    private static func newGrants(
        for transaction: TransactionFact, product: CatalogueProduct, input: FulfillmentInput, chain: ChainFacts
    ) -> [GrantDecision] {
        // An import brings a user's history: only the period in force grants; the periods already
        // over are kept as facts.
        if case .notification(NotificationMatrix.historyImport, _) = input.source,
            !(transaction.purchaseDate <= input.now && (transaction.expiresDate ?? .distantFuture) > input.now)
        {
            return []
        }
        let existing = Set(input.grants.map(\.grantKey))
        return grants(for: transaction, product: product, chain: chain, catalogue: input.catalogue, granted: input.chainGrants)
            .filter { !existing.contains($0.grantKey) }
    }

    /// The chain's recomputed subscription row; nil when it would not change.
    static func projection(
        _ input: FulfillmentInput, chain: ChainFacts, product: CatalogueProduct, user: UserRecord
    ) -> SubscriptionChange? {
        // A consumable's purchase is its own "chain" (Apple gives it its own original transaction
        // id) and no subscription: nothing to project.
        guard product.kind == .autoRenewable, let state = SubscriptionProjection.project(chain, now: input.now),
            state != input.subscription?.state
        else { return nil }
        return SubscriptionChange(
            state: state, userID: user.userID,
            subscriptionGroupID: input.catalogue[state.activeProductID]?.subscriptionGroupID ?? product.subscriptionGroupID,
            previousStatus: input.subscription?.state.status)
    }

    /// The `status_history` rows of the event's order and subscription changes.
    static func history(order: OrderChange?, subscription: SubscriptionChange?, cause: String) -> [StatusChange] {
        var history: [StatusChange] = []
        if let order {
            // A completed order passes through VERIFIED, and history records both steps.
            let key = order.order.orderNo
            history.append(
                StatusChange(
                    entity: .order, key: key, previous: order.previousStatus?.rawValue,
                    current: OrderStatus.verified.rawValue, cause: cause))
            history.append(
                StatusChange(
                    entity: .order, key: key, previous: OrderStatus.verified.rawValue,
                    current: OrderStatus.fulfilled.rawValue, cause: cause))
        }
        if let subscription, subscription.previousStatus != subscription.state.status {
            history.append(
                StatusChange(
                    entity: .subscription, key: subscription.state.historyKey, previous: subscription.previousStatus?.rawValue,
                    current: subscription.state.status.rawValue, cause: cause))
        }
        return history
    }

    /// The uploader of their own family-shared access when nothing else names its owner: a
    /// `FAMILY_SHARED` transaction observed by a logged-in user carries no token of theirs (Apple
    /// never sets one for a member), so the upload is what binds it; never to the purchaser.
    private static func familyMemberUpload(_ input: FulfillmentInput) -> UserRecord? {
        guard case .observedSubmission(let submitter) = input.source, let transaction = input.transaction,
            transaction.isFamilyShared, input.subscription == nil
        else { return nil }
        return input.submitterUser ?? UserRecord(userID: submitter, isTestUser: false)
    }

    /// Resolves the order of a transaction being applied; a non-nil result refuses the event.
    private static func orderPlan(
        _ plan: inout FulfillmentPlan, input: FulfillmentInput, transaction: TransactionFact, product: CatalogueProduct,
        chain: ChainFacts
    ) -> FulfillmentVerdict? {
        let user = plan.user!.userID
        if case .clientSubmission(let orderNo, _) = input.source {
            guard let order = input.submittedOrder, order.userID == user else {
                return .refused(code: "ORDER_NOT_FOUND", reason: "order \(orderNo) does not belong to the transaction's user")
            }
            if let linked = input.linkedOrder {
                if linked.orderNo == order.orderNo { return nil }
                return .refused(code: "TRANSACTION_ALREADY_USED", reason: "the transaction fulfilled order \(linked.orderNo)")
            }
            guard order.productID == transaction.productID else {
                return .refused(code: "ORDER_PRODUCT_MISMATCH", reason: "the order is for another product")
            }
            guard !transaction.isFamilyShared else {
                return .refused(code: "FAMILY_SHARED", reason: "family-shared access is not a paid order")
            }
            if order.transactionID != nil || !order.status.canMove(to: .verified) {
                return .refused(code: "ORDER_CONFLICT", reason: "the order is \(order.status.rawValue)")
            }
            if transaction.revocationDate != nil {
                return .refused(code: "TRANSACTION_REVOKED", reason: "a revoked transaction fulfils no order")
            }
            if let expires = transaction.expiresDate, expires <= input.now {
                return .refused(code: "TRANSACTION_EXPIRED", reason: "an expired transaction cannot fulfil a new order")
            }
            plan.order = link(order, to: transaction, product: product)
            return nil
        }
        // Family-shared access is a separate entitlement, never a paid order; a linked order is done.
        guard !transaction.isFamilyShared, input.linkedOrder == nil else { return nil }
        let hint: OrderType
        switch input.source.action {
        case .applyTransaction(let type): hint = type
        // A reversed refund applies what the revocation held back: a purchase or renewal that
        // arrived while its transaction was revoked made no order and granted nothing.
        case .restoreTransaction: hint = .recovery
        default: return nil
        }
        let isRenewal = transaction.transactionReason.map { $0 == "RENEWAL" } ?? (hint == .renewal)
        if !isRenewal {
            let candidate = input.openOrders
                .filter {
                    $0.userID == user && $0.productID == transaction.productID && $0.status.isOpen
                        && $0.transactionID == nil && ($0.type == .initial || $0.type == .change)
                        && $0.createdAt <= transaction.purchaseDate.addingTimeInterval(clockTolerance)
                }
                .max { $0.createdAt < $1.createdAt }
            // A revoked transaction (its refund known before its purchase) completes no order:
            // the intent it would have completed can never be, so it ends FAILED.
            if let candidate, transaction.revocationDate != nil {
                plan.failedOrder = failure(
                    of: candidate, code: .transactionRevoked, reason: "Apple revoked the transaction that paid for the order",
                    transactionID: transaction.transactionID, environment: transaction.environment)
                return nil
            }
            if let candidate {
                plan.order = link(candidate, to: transaction, product: product)
                return nil
            }
        }
        // Nor does it get an order of its own: nothing was delivered for it, and the consumption
        // answer must not say otherwise.
        if transaction.revocationDate != nil { return nil }
        var type = OrderType.recovery
        if isRenewal {
            type = .renewal
        } else if hint == .change || planChange(transaction, chain: chain, catalogue: input.catalogue) != nil {
            type = .change
        }
        plan.order = OrderChange(
            order: OrderRecord(
                orderNo: generatedOrderNumber(type: type, transaction: transaction), userID: user,
                productID: transaction.productID, type: type, status: .fulfilled,
                transactionID: transaction.transactionID, createdAt: input.now),
            isNew: true, previousStatus: nil, originalTransactionID: transaction.originalTransactionID,
            environment: transaction.environment, subscriptionGroupID: product.subscriptionGroupID)
        return nil
    }

    private static func link(_ order: OrderRecord, to transaction: TransactionFact, product: CatalogueProduct)
        -> OrderChange
    {
        var linked = order
        linked.status = .fulfilled
        linked.transactionID = transaction.transactionID
        return OrderChange(
            order: linked, isNew: false, previousStatus: order.status,
            originalTransactionID: transaction.originalTransactionID, environment: transaction.environment,
            subscriptionGroupID: product.subscriptionGroupID)
    }

    /// Orders the processor creates are numbered after their transaction, so a retry can only
    /// find the same number (and the unique transaction link refuses a second order anyway).
    public static func generatedOrderNumber(type: OrderType, transaction: TransactionFact) -> String {
        let prefix: String
        switch type {
        case .initial: prefix = "INI"
        case .renewal: prefix = "RNW"
        case .change: prefix = "CHG"
        case .recovery: prefix = "RCV"
        }
        return "\(prefix)-\(transaction.environment.prefix(1))-\(transaction.transactionID)"
    }

    /// The grant of a transaction: `CreditRules.grants` as in purchase order, except inside a run
    /// of immediate plan changes in one period (upgrades, same-level switches), where it is what
    /// the run grants in purchase order less what its other transactions were granted already.
    /// So the run's total does not depend on the order its facts arrive in: a later switch known
    /// first was granted as a purchase, and the plans before it then add only what is missing
    /// (in purchase order this is exactly `CreditRules.grants`).
    static func grants(
        for transaction: TransactionFact, product: CatalogueProduct, chain: ChainFacts, catalogue: [String: CatalogueProduct],
        granted: [String: MicroCredits]
    ) -> [GrantDecision] {
        let change = planChange(transaction, chain: chain, catalogue: catalogue)
        let own = CreditRules.grants(for: transaction, product: product, change: change)
        let run = changeRun(transaction, chain: chain, catalogue: catalogue)
        guard product.kind == .autoRenewable, transaction.revocationDate == nil, run.count > 1 else { return own }
        var total: MicroCredits = 0
        var others: MicroCredits = 0
        for member in run {
            guard let memberProduct = catalogue[member.productID] else { continue }
            if member.revocationDate == nil {
                let inOrder = CreditRules.grants(
                    for: member, product: memberProduct, change: planChange(member, chain: chain, catalogue: catalogue))
                total += inOrder.first?.amount ?? 0
            }
            if member.transactionID != transaction.transactionID {
                others += granted[CreditRules.firstGrantKey(member, product: memberProduct)] ?? 0
            }
        }
        let amount = max(0, total - others)
        guard amount > 0, var decision = own.first ?? CreditRules.grants(for: transaction, product: product).first else { return [] }
        if own.isEmpty, let change { decision.reason = change.relation == .upgrade ? "UPGRADE" : "CROSSGRADE" }
        decision.amount = amount
        return [decision]
    }

    /// The grant a refund of `refunded` frees: the chain's next purchase of the same plan inside
    /// the refunded period (not refunded itself) is a new purchase now, and gets what it lacks of
    /// that under its own grant key (nothing when it was granted already).
    static func freedGrants(
        by refunded: TransactionFact, chain: ChainFacts, catalogue: [String: CatalogueProduct], granted: [String: MicroCredits]
    ) -> [FreedGrant] {
        guard
            let next = chain.transactions.first(where: {
                $0.productID == refunded.productID && $0.revocationDate == nil && $0.transactionReason == "PURCHASE"
                    && replacedBy($0, chain: chain)?.transactionID == refunded.transactionID
            }), let product = catalogue[next.productID]
        else { return [] }
        return grants(for: next, product: product, chain: chain, catalogue: catalogue, granted: granted)
            .filter { granted[$0.grantKey] == nil }
            .map { FreedGrant(transaction: next, decision: $0) }
    }

    /// The run of immediate plan changes `transaction` belongs to, in purchase order: from the
    /// purchase the first change replaced to the last change replacing its predecessor at once.
    static func changeRun(
        _ transaction: TransactionFact, chain: ChainFacts, catalogue: [String: CatalogueProduct]
    ) -> [TransactionFact] {
        var first = transaction
        var seen: Set<String> = [transaction.transactionID]
        while let previous = replacedAtOnce(by: first, chain: chain, catalogue: catalogue), seen.insert(previous.transactionID).inserted {
            first = previous
        }
        var run = [first]
        seen = [first.transactionID]
        let later = chain.transactions.sorted { ($0.purchaseDate, $0.transactionID) < ($1.purchaseDate, $1.transactionID) }
        while let next = later.first(where: {
            !seen.contains($0.transactionID)
                && replacedAtOnce(by: $0, chain: chain, catalogue: catalogue)?.transactionID == run.last!.transactionID
        }) {
            seen.insert(next.transactionID)
            run.append(next)
        }
        // The walk back may have stopped short of the transaction itself only if the chain is not
        // a run; the transaction is always one of its members.
        return run.contains { $0.transactionID == transaction.transactionID } ? run : [transaction]
    }

    /// The purchase `transaction` replaced at once (an upgrade or a same-level, same-duration
    /// switch Apple applied immediately), if it is one. A renewal (`transactionReason` RENEWAL)
    /// replaces nothing at once. A purchase of the same product while its period still runs is a
    /// switch back whose switch away is not known yet (facts arrive in any order): it links too,
    /// unless that period was refunded (then it is a new purchase).
    private static func replacedAtOnce(
        by transaction: TransactionFact, chain: ChainFacts, catalogue: [String: CatalogueProduct]
    ) -> TransactionFact? {
        guard transaction.transactionReason != "RENEWAL", let previous = replacedBy(transaction, chain: chain),
            let old = catalogue[previous.productID], let later = catalogue[transaction.productID]
        else { return nil }
        if previous.productID == transaction.productID {
            return transaction.transactionReason == "PURCHASE" && previous.revocationDate == nil ? previous : nil
        }
        guard ChangeTiming.of(current: old, candidate: later) == .now else { return nil }
        let step = PlanRelation.between(current: old, candidate: later)
        return step == .upgrade || step == .crossgrade ? previous : nil
    }

    /// The change of plan a transaction is, when Apple applied it at once: the chain's previous
    /// purchase, of another product of the group that changes `NOW` (a higher level, or the same
    /// level and duration), whose period was still running when this transaction was bought; and
    /// the purchases before it that were replaced the same way in the same period.
    public static func planChange(
        _ transaction: TransactionFact, chain: ChainFacts, catalogue: [String: CatalogueProduct]
    ) -> PlanChange? {
        var replaced: [CatalogueProduct] = []
        var relation: PlanRelation?
        var current = transaction
        var seen: Set<String> = [transaction.transactionID]
        while let previous = replacedAtOnce(by: current, chain: chain, catalogue: catalogue),
            seen.insert(previous.transactionID).inserted, let old = catalogue[previous.productID],
            let later = catalogue[current.productID]
        {
            // The same product again (a switch back whose switch away is unknown yet) counts as a switch.
            let step = PlanRelation.between(current: old, candidate: later)
            relation = relation ?? (step == .current ? .crossgrade : step)
            replaced.append(old)
            current = previous
        }
        guard let relation else { return nil }
        return PlanChange(relation: relation, replaced: replaced)
    }

    /// The chain's purchase just before `transaction`, if its period was still running when
    /// `transaction` was bought.
    private static func replacedBy(_ transaction: TransactionFact, chain: ChainFacts) -> TransactionFact? {
        let earlier = chain.transactions.filter {
            $0.transactionID != transaction.transactionID && $0.purchaseDate < transaction.purchaseDate
        }
        guard let previous = earlier.max(by: { ($0.purchaseDate, $0.transactionID) < ($1.purchaseDate, $1.transactionID) }),
            (previous.expiresDate ?? .distantFuture) > transaction.purchaseDate
        else { return nil }
        return previous
    }
}
