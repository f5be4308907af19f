import Domain
import Foundation
import Testing

/// The catalogue of domain.md.
enum Catalogue {
    static let group = "21000000"
    static let starter = CatalogueProduct(
        productID: "com.example.starter.monthly", subscriptionGroupID: group, planCode: "starter", planLevel: 2,
        duration: .month, creditsAmount: 1000)
    static let pro = CatalogueProduct(
        productID: "com.example.pro.monthly", subscriptionGroupID: group, planCode: "pro", planLevel: 1,
        duration: .month, creditsAmount: 3000, upgradeGrant: .difference)
    static let proYearly = CatalogueProduct(
        productID: "com.example.pro.yearly", subscriptionGroupID: group, planCode: "pro", planLevel: 1,
        duration: .year, creditsAmount: 3000)
    /// Same level as starter, same duration: a switch between them applies at once.
    static let team = CatalogueProduct(
        productID: "com.example.team.monthly", subscriptionGroupID: group, planCode: "team", planLevel: 2,
        duration: .month, creditsAmount: 1200)
    /// A credit pack.
    static let pack = CatalogueProduct.consumable(productID: "com.example.credits.500", planCode: "pack500", permanentCredits: 500)
    static let all = Dictionary(uniqueKeysWithValues: [starter, pro, proYearly, team, pack].map { ($0.productID, $0) })
}

/// Storage in memory, applying plans the way the worker's SQL does, so sequences of events can be
/// checked without a database.
struct MemoryStore {
    var chain = ChainFacts()
    var owners: [String: String] = [:]
    var subscription: SubscriptionRecord?
    var orders: [OrderRecord] = []
    /// Every grant as a lot, in the order granted, with the transaction that earned it.
    var lots: [(transactionID: String, record: GrantRecord)] = []
    var users: [String: UserRecord] = [:]
    var tokens: [String: String] = [:]
    var binding: ChainBindingRecord?

    func input(_ source: FactSource, _ transaction: TransactionFact?, _ renewal: RenewalFact? = nil, now: Date)
        -> FulfillmentInput
    {
        let submitted: OrderRecord? = {
            if case .clientSubmission(let orderNo, _) = source { return orders.first { $0.orderNo == orderNo } }
            return nil
        }()
        return FulfillmentInput(
            source: source, transaction: transaction, renewal: renewal,
            tokenUser: transaction?.appAccountToken.flatMap { tokens[$0] }.flatMap { users[$0] }, binding: binding,
            submitterUser: source.submitter.flatMap { users[$0] }, subscription: subscription, catalogue: Catalogue.all, stored: chain,
            transactionOwner: transaction.flatMap { owners[$0.transactionID] },
            linkedOrder: transaction.flatMap { t in orders.first { $0.transactionID == t.transactionID } },
            submittedOrder: submitted, openOrders: orders.filter { $0.status.isOpen },
            grants: lots.filter { $0.transactionID == transaction?.transactionID }.map(\.record),
            chainGrants: Dictionary(lots.map { ($0.record.grantKey, $0.record.amount) }) { first, _ in first },
            everyoneIsTestUser: true, now: now)
    }

    @discardableResult
    mutating func apply(_ source: FactSource, _ transaction: TransactionFact?, _ renewal: RenewalFact? = nil, now: Date)
        -> FulfillmentPlan
    {
        let plan = FulfillmentPlanner.plan(input(source, transaction, renewal, now: now))
        // Written whatever the verdict, as the worker does (a refused upload ends its order too).
        if let failure = plan.failedOrder, let index = orders.firstIndex(where: { $0.orderNo == failure.order.orderNo }) {
            orders[index] = failure.order
        }
        guard plan.verdict == .applied, let user = plan.user else { return plan }
        if let member = plan.bindFamilyMember, binding == nil {
            binding = ChainBindingRecord(userID: member, isTestUser: user.isTestUser, overridesTokens: false)
        }
        if let stored = plan.storeTransaction {
            chain.record(stored)
            owners[stored.transactionID] = owners[stored.transactionID] ?? user.userID
        }
        if let renewal = plan.storeRenewal { chain.record(renewal) }
        if let change = plan.order {
            orders.removeAll { $0.orderNo == change.order.orderNo }
            orders.append(change.order)
        }
        if let change = plan.subscription {
            subscription = SubscriptionRecord(owner: user, state: change.state, frozenReason: subscription?.frozenReason)
        }
        let sourced = plan.grants.map { (transaction!.transactionID, $0) } + plan.freedGrants.map { ($0.transaction.transactionID, $0.decision) }
        for (transactionID, grant) in sourced where grants[grant.grantKey] == nil {
            lots.append((transactionID, GrantRecord(grantKey: grant.grantKey, userID: user.userID, pool: grant.pool, amount: grant.amount)))
        }
        for index in lots.indices {
            if plan.revocations.contains(where: { $0.grantKey == lots[index].record.grantKey }) {
                CreditRules.revoke(&lots[index].record, percentage: plan.revocationPercentage)
            }
            if plan.restorations.contains(where: { $0.grantKey == lots[index].record.grantKey }) {
                CreditRules.restore(&lots[index].record)
            }
            if let ending = plan.restoreClearing { CreditRules.restoreClearing(&lots[index].record, ending: ending) }
        }
        return plan
    }

    /// A client's purchase order (alice's unless told), as `POST …/orders` leaves it.
    mutating func openOrder(
        _ orderNo: String, _ product: CatalogueProduct, status: OrderStatus = .created, createdAt: Date, user: String = "alice"
    ) {
        orders.append(
            OrderRecord(
                orderNo: orderNo, userID: user, productID: product.productID, type: .initial, status: status, transactionID: nil,
                createdAt: createdAt))
    }

    var grants: [String: (transactionID: String, record: GrantRecord)] {
        Dictionary(lots.map { ($0.record.grantKey, $0) }) { first, _ in first }
    }
    /// The sum of the lots, as the balances are.
    var balance: MicroCredits { lots.reduce(0) { $0 + $1.record.remaining } }
    func balance(_ pool: CreditPool) -> MicroCredits {
        lots.filter { $0.record.pool == pool }.reduce(0) { $0 + $1.record.remaining }
    }

    /// Metered usage: the pools in order, within each the lot granted first; false (nothing
    /// changes) when the balance cannot cover it.
    @discardableResult
    mutating func use(_ cost: MicroCredits) -> Bool {
        let balances = Dictionary(CreditPool.allCases.map { ($0, balance($0)) }) { a, _ in a }
        guard let drawn = CreditRules.draw(cost, from: balances) else { return false }
        for (pool, amount) in drawn {
            var pooled = lots.filter { $0.record.pool == pool }.map(\.record)
            CreditRules.burn(amount, from: &pooled)
            for lot in pooled {
                let index = lots.firstIndex { $0.record.grantKey == lot.grantKey }!
                lots[index].record = lot
            }
        }
        return true
    }

    /// The midnight clearing of a chain's true ending: every SUBSCRIPTION lot.
    mutating func clear(ending: String) {
        for index in lots.indices where lots[index].record.pool == .subscription {
            CreditRules.clear(&lots[index].record, ending: ending)
        }
    }
}

@Suite struct FulfillmentPlannerTests {
    let t0 = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01T00:00:00Z
    let day: TimeInterval = 86_400
    let token = "6f1c1e2a-0000-4000-8000-000000000001"

    func store() -> MemoryStore {
        var store = MemoryStore()
        store.users["alice"] = UserRecord(userID: "alice", isTestUser: false)
        store.users["bob"] = UserRecord(userID: "bob", isTestUser: true)
        store.tokens[token] = "alice"
        store.tokens["6f1c1e2a-0000-4000-8000-00000000000b"] = "bob"
        return store
    }

    func tx(
        _ id: String, _ product: CatalogueProduct = Catalogue.starter, purchase: Date, days: Double = 30,
        reason: String = "PURCHASE", original: String = "1000", token: String? = "6f1c1e2a-0000-4000-8000-000000000001",
        signed: Date? = nil, environment: String = "Sandbox"
    ) -> TransactionFact {
        TransactionFact(
            environment: environment, transactionID: id, originalTransactionID: original, productID: product.productID,
            purchaseDate: purchase, expiresDate: purchase + days * day, transactionReason: reason, appAccountToken: token,
            signedDate: signed ?? purchase)
    }

    let initialBuy = FactSource.notification(type: "SUBSCRIBED", subtype: "INITIAL_BUY")
    let didRenew = FactSource.notification(type: "DID_RENEW", subtype: nil)

    @Test func initialBuyCompletesTheOpenOrderActivatesAndGrantsOnce() {
        var store = store()
        store.openOrder("PAY1", Catalogue.starter, createdAt: t0 - 60)
        let purchase = tx("1000", purchase: t0)
        let plan = store.apply(initialBuy, purchase, now: t0 + day)
        #expect(plan.verdict == .applied)
        #expect(plan.order?.order.orderNo == "PAY1")
        #expect(plan.order?.order.status == .fulfilled)
        #expect(plan.order?.previousStatus == .created)
        #expect(plan.grants.map(\.amount) == [Credits.micro(1000)])
        #expect(plan.subscription?.state.status == .active)
        #expect(
            plan.history.map { "\($0.entity.rawValue):\($0.previous ?? "-")>\($0.current)" } == [
                "ORDER:CREATED>VERIFIED", "ORDER:VERIFIED>FULFILLED", "SUBSCRIPTION:->ACTIVE",
            ])
        // The same fact again (another delivery, or the client's upload of it): nothing new.
        let again = store.apply(initialBuy, purchase, now: t0 + day)
        #expect(again.verdict == .applied)
        #expect(again.storeTransaction == nil && again.order == nil && again.grants.isEmpty && again.subscription == nil)
        let upload = store.apply(.clientSubmission(orderNo: "PAY1", submitter: "alice"), purchase, now: t0 + day)
        #expect(upload.verdict == .applied && upload.order == nil && upload.grants.isEmpty)
        #expect(store.balance == Credits.micro(1000))
    }

    @Test func purchasesWithoutAnOpenOrderGetARecoveryOrderAndRenewalsARenewalOrder() {
        var store = store()
        let plan = store.apply(initialBuy, tx("1000", purchase: t0), now: t0 + day)
        #expect(plan.order?.order.type == .recovery)
        #expect(plan.order?.isNew == true)
        #expect(plan.order?.order.orderNo == "RCV-S-1000")
        let renewal = store.apply(didRenew, tx("1001", purchase: t0 + 30 * day, reason: "RENEWAL"), now: t0 + 31 * day)
        #expect(renewal.order?.order.type == .renewal)
        #expect(renewal.grants.first?.grantKey == "period:Sandbox:1001")
        #expect(store.balance == Credits.micro(2000))
        #expect(store.subscription?.state.lastTransactionID == "1001")
        // An order created after the purchase (plus the clock tolerance) is not the purchase's order.
        var late = self.store()
        late.openOrder("PAY2", Catalogue.starter, createdAt: t0 + 600)
        #expect(late.apply(initialBuy, tx("1000", purchase: t0), now: t0 + day).order?.order.type == .recovery)
    }

    @Test func attributionNeverGuesses() {
        var store = store()
        let stranger = tx("1000", purchase: t0, token: "6f1c1e2a-0000-4000-8000-0000000000ff")
        #expect(store.apply(initialBuy, stranger, now: t0).verdict == .unmatched(.account))
        #expect(store.apply(initialBuy, tx("1000", purchase: t0, token: nil), now: t0).verdict == .unmatched(.account))
        var unknownProduct = tx("1000", purchase: t0)
        unknownProduct.productID = "com.example.unknown"
        #expect(store.apply(initialBuy, unknownProduct, now: t0).verdict == .unmatched(.product))
        // A chain attributed by its first fact keeps its owner for later facts without a token.
        store.apply(initialBuy, tx("1000", purchase: t0), now: t0)
        let renewal = store.apply(didRenew, tx("1001", purchase: t0 + 30 * day, reason: "RENEWAL", token: nil), now: t0 + 31 * day)
        #expect(renewal.verdict == .applied)
        #expect(renewal.user?.userID == "alice")
    }

    /// The attribution step by Apple Account: a purchase no token attributes is the one user's
    /// whose earlier purchases carry its appTransactionId; with several such users nobody is
    /// guessed and the reason says why; a token of ours still decides over it.
    @Test func aTokenlessPurchaseGoesToTheOneUserItsAppleAccountBoughtFor() {
        let store = store()
        let alice = store.users["alice"]!
        let bob = store.users["bob"]!
        let purchase = tx("6000", purchase: t0, original: "6000", token: nil)
        var input = store.input(initialBuy, purchase, now: t0 + 60)
        let nobody = FulfillmentPlanner.plan(input)
        #expect(nobody.verdict == .unmatched(.account))
        #expect(nobody.unattributedReason == nil)

        input.appTransactionUsers = [bob]
        let attributed = FulfillmentPlanner.plan(input)
        #expect(attributed.verdict == .applied)
        #expect(attributed.user == bob)
        #expect(attributed.attribution == .appTransaction)
        #expect(attributed.grants.map(\.grantKey) == ["period:Sandbox:6000"])
        #expect(attributed.subscription?.userID == "bob")

        // A token this system never issued counts as none.
        var stranger = store.input(
            initialBuy, tx("6000", purchase: t0, original: "6000", token: "6f1c1e2a-0000-4000-8000-0000000000ff"), now: t0 + 60)
        stranger.appTransactionUsers = [bob]
        #expect(FulfillmentPlanner.plan(stranger).user == bob)

        input.appTransactionUsers = [alice, bob]
        let several = FulfillmentPlanner.plan(input)
        #expect(several.verdict == .unmatched(.account))
        #expect(several.user == nil && several.attribution == nil)
        #expect(several.unattributedReason?.contains("2 users") == true)

        // A token of ours decides, whoever else the Apple Account bought for.
        var tokened = store.input(initialBuy, tx("6001", purchase: t0, original: "6001"), now: t0 + 60)
        tokened.appTransactionUsers = [bob]
        let byToken = FulfillmentPlanner.plan(tokened)
        #expect(byToken.user == alice && byToken.attribution == .token)

        // The Sandbox rule still holds on a Production deployment: Alice is no test user.
        input.appTransactionUsers = [alice]
        input.everyoneIsTestUser = false
        #expect(FulfillmentPlanner.plan(input).verdict == .refused(code: "SANDBOX_REFUSED", reason: "Sandbox facts only touch test users"))
    }

    /// An Apple Account Apple named (Get App Transaction Info) attributes by the same rule, under
    /// its own method; what an apply delivers is what Finish Transaction reports: a purchase or a
    /// renewal attributed and granted, never a revoked one nor an unmatched one.
    @Test func aLookedUpAppleAccountAttributesAndDeliveriesAreTheGrantedTransactions() {
        let store = store()
        let bob = store.users["bob"]!
        var input = store.input(initialBuy, tx("6100", purchase: t0, original: "6100", token: nil), now: t0 + 60)
        #expect(FulfillmentPlanner.plan(input).deliveredTransaction == nil, "unmatched: nothing delivered")
        input.appTransactionUsers = [bob]
        input.appTransactionLookedUp = true
        let looked = FulfillmentPlanner.plan(input)
        #expect(looked.user == bob && looked.attribution == .appTransactionLookup)
        #expect(looked.deliveredTransaction?.transactionID == "6100")
        #expect(AttributionMethod.appTransactionLookup.byAppleAccount && !AttributionMethod.token.byAppleAccount)

        var refunded = tx("6101", purchase: t0, original: "6101")
        refunded.revocationDate = t0 + day
        let revoked = FulfillmentPlanner.plan(
            store.input(.notification(type: "REFUND", subtype: nil), refunded, now: t0 + day))
        #expect(revoked.deliveredTransaction == nil)
        #expect(FulfillmentPlanner.plan(store.input(initialBuy, tx("6102", purchase: t0), now: t0)).deliveredTransaction != nil)
    }

    @Test func sandboxFactsOnlyTouchTestUsersOnAProductionDeployment() {
        let store = store()
        var input = store.input(initialBuy, tx("1000", purchase: t0), now: t0)
        input.everyoneIsTestUser = false
        #expect(FulfillmentPlanner.plan(input).verdict == .refused(code: "SANDBOX_REFUSED", reason: "Sandbox facts only touch test users"))
        let bobs = tx("2000", purchase: t0, original: "2000", token: "6f1c1e2a-0000-4000-8000-00000000000b")
        input = store.input(initialBuy, bobs, now: t0)
        input.everyoneIsTestUser = false
        #expect(FulfillmentPlanner.plan(input).verdict == .applied)
        input = store.input(initialBuy, tx("1000", purchase: t0, environment: "Production"), now: t0)
        input.everyoneIsTestUser = false
        #expect(FulfillmentPlanner.plan(input).verdict == .applied)
    }

    @Test func anotherUsersTransactionIsAnAccountConflictThatFreezesTheChain() {
        var store = store()
        let purchase = tx("1000", purchase: t0)
        store.apply(initialBuy, purchase, now: t0)
        // Bob is logged in and uploads Alice's transaction for an order of his.
        let upload = store.apply(.clientSubmission(orderNo: "bobs-order", submitter: "bob"), purchase, now: t0)
        #expect(upload.verdict == .accountConflict(attributed: "alice", other: "bob"))
        #expect(upload.freezeChain)
        // The token now maps to Bob (a re-assigned token): the stored owner still wins.
        store.tokens[token] = "bob"
        let renewal = store.apply(didRenew, tx("1001", purchase: t0 + 30 * day, reason: "RENEWAL"), now: t0 + 31 * day)
        #expect(renewal.verdict == .accountConflict(attributed: "bob", other: "alice"))
        store.tokens[token] = "alice"
        store.subscription?.frozenReason = "ACCOUNT_CONFLICT"
        let frozen = store.apply(didRenew, tx("1001", purchase: t0 + 30 * day, reason: "RENEWAL"), now: t0 + 31 * day)
        #expect(frozen.verdict == .refused(code: "CHAIN_FROZEN", reason: "ACCOUNT_CONFLICT"))
    }

    /// An account switch on one device: Bob's app observes Alice's purchase. It is hers: applied to
    /// her (nothing new here), nothing frozen; the ingress tells Bob it is another account's.
    @Test func anObservedUploadOfAnotherUsersPurchaseIsAppliedToItsOwner() {
        var store = store()
        let purchase = tx("1000", purchase: t0)
        let upload = store.apply(.observedSubmission(submitter: "bob"), purchase, now: t0)
        #expect(upload.verdict == .applied)
        #expect(upload.user?.userID == "alice")
        #expect(!upload.freezeChain)
        #expect(store.subscription?.owner.userID == "alice")
        #expect(store.balance == Credits.micro(1000))
        #expect(store.apply(.observedSubmission(submitter: "bob"), purchase, now: t0).writesNothing)
    }

    /// A purchase made outside the app's account flow (an offer code redeemed in the App Store, a
    /// subscriber from before this back end) waits unmatched until an operator binds its chain;
    /// then it and every later token-less fact are the bound user's, and a token of another user
    /// is still a conflict.
    @Test func aTokenlessChainWaitsForItsBindingAndThenGrantsOnce() {
        var store = store()
        let purchase = tx("5000", purchase: t0, original: "5000", token: nil)
        #expect(store.apply(initialBuy, purchase, now: t0).verdict == .unmatched(.account))
        store.binding = ChainBindingRecord(userID: "bob", isTestUser: true, overridesTokens: false)
        let replayed = store.apply(initialBuy, purchase, now: t0 + 60)
        #expect(replayed.verdict == .applied)
        #expect(replayed.user?.userID == "bob")
        #expect(replayed.grants.count == 1)
        #expect(store.apply(initialBuy, purchase, now: t0 + 120).grants.isEmpty)
        let renewal = tx("5001", purchase: t0 + 30 * day, reason: "RENEWAL", original: "5000", token: nil)
        #expect(store.apply(didRenew, renewal, now: t0 + 30 * day).user?.userID == "bob")
        // A token issued to nobody we know (another system's): the binding still decides.
        let foreignToken = tx("5002", purchase: t0 + 60 * day, reason: "RENEWAL", original: "5000", token: "00000000-0000-4000-8000-0000000000ff")
        #expect(store.apply(didRenew, foreignToken, now: t0 + 60 * day).user?.userID == "bob")
        // Alice's token on the bound chain: a conflict, never a silent move.
        let alices = tx("5003", purchase: t0 + 90 * day, reason: "RENEWAL", original: "5000")
        #expect(store.apply(didRenew, alices, now: t0 + 90 * day).verdict == .accountConflict(attributed: "alice", other: "bob"))
        #expect(store.balance == Credits.micro(3000))
    }

    /// An operator's resolution outranks the tokens on the facts: the chain is the chosen user's.
    @Test func aResolutionOutranksTheFactsTokens() {
        var store = store()
        let purchase = tx("1000", purchase: t0)
        store.apply(initialBuy, purchase, now: t0)
        let bobs = tx("1001", purchase: t0 + 30 * day, reason: "RENEWAL", token: "6f1c1e2a-0000-4000-8000-00000000000b")
        #expect(store.apply(didRenew, bobs, now: t0 + 30 * day).verdict == .accountConflict(attributed: "bob", other: "alice"))
        // The operator gives the chain to Alice: Bob's token on the renewal no longer decides.
        store.binding = ChainBindingRecord(userID: "alice", isTestUser: false, overridesTokens: true)
        let resolved = store.apply(didRenew, bobs, now: t0 + 30 * day)
        #expect(resolved.verdict == .applied)
        #expect(resolved.user?.userID == "alice")
        #expect(resolved.grants.count == 1)
    }

    /// Family Sharing: Apple sends a member's shared access without the member's token. The
    /// member's own upload binds it to them (never to the purchaser, never a paid order); the
    /// member's facts wait unmatched until then, follow the binding afterwards (REVOKE included),
    /// and another user's upload cannot take it over.
    @Test func aFamilyMembersUploadBindsTheirSharedAccess() {
        var store = store()
        store.users["carol"] = UserRecord(userID: "carol", isTestUser: true)
        let shared = TransactionFact(
            environment: "Sandbox", transactionID: "7000", originalTransactionID: "7000",
            productID: Catalogue.starter.productID, purchaseDate: t0, expiresDate: t0 + 30 * day,
            ownershipType: "FAMILY_SHARED", transactionReason: "PURCHASE", signedDate: t0)
        #expect(store.apply(initialBuy, shared, now: t0).verdict == .unmatched(.account))
        let upload = store.apply(.observedSubmission(submitter: "carol"), shared, now: t0 + 60)
        #expect(upload.verdict == .applied)
        #expect(upload.user?.userID == "carol")
        #expect(upload.bindFamilyMember == "carol")
        #expect(upload.order == nil)
        #expect(upload.grants.isEmpty, "the catalogue's family rule: shared access grants no credits by default")
        #expect(store.subscription?.owner.userID == "carol")
        #expect(store.subscription?.state.status == .active)
        // Bob uploads the same shared access later: it stays Carol's (the ingress answers Bob 409).
        let bobs = store.apply(.observedSubmission(submitter: "bob"), shared, now: t0 + 120)
        #expect(bobs.user?.userID == "carol")
        #expect(bobs.bindFamilyMember == nil)
        // The purchaser revokes the sharing: the member's access ends.
        var revoked = shared
        revoked.revocationDate = t0 + 10 * day
        revoked.signedDate = t0 + 10 * day
        let revoke = store.apply(.notification(type: "REVOKE", subtype: nil), revoked, now: t0 + 10 * day)
        #expect(revoke.user?.userID == "carol")
        #expect(store.subscription?.state.status == .revoked)
    }

    @Test func clientUploadsMustFitTheirOrder() {
        var store = store()
        for (orderNo, status) in [("PAY1", OrderStatus.cancelled), ("BAD1", .created), ("BAD2", .pending)] {
            store.openOrder(orderNo, Catalogue.pro, status: status, createdAt: t0 - 60)
        }
        let upload = { (orderNo: String) in FactSource.clientSubmission(orderNo: orderNo, submitter: "alice") }
        let verdict = { (plan: FulfillmentPlan) -> String? in
            if case .refused(let code, _) = plan.verdict { return code }
            return nil
        }
        // What no retry of the transaction can change ends the order FAILED with its code.
        let mismatch = store.apply(upload("BAD1"), tx("1000", purchase: t0), now: t0)
        #expect(verdict(mismatch) == "ORDER_PRODUCT_MISMATCH")
        #expect(mismatch.failedOrder?.code == .productMismatch && mismatch.failedOrder?.previousStatus == .created)
        let expired = store.apply(upload("BAD2"), tx("1000", Catalogue.pro, purchase: t0 - 40 * day), now: t0)
        #expect(verdict(expired) == "TRANSACTION_EXPIRED")
        #expect(expired.failedOrder?.code == .transactionExpired && expired.failedOrder?.previousStatus == .pending)
        #expect(store.orders.filter { $0.status == .failed }.map(\.orderNo) == ["BAD1", "BAD2"])
        // FAILED is final: another upload for it is refused and fails nothing again.
        let late = store.apply(upload("BAD1"), tx("1001", Catalogue.pro, purchase: t0), now: t0)
        #expect(verdict(late) == "ORDER_CONFLICT")
        #expect(late.failedOrder == nil && late.events.isEmpty)
        // A real charge reopens a cancelled order.
        let plan = store.apply(upload("PAY1"), tx("1001", Catalogue.pro, purchase: t0), now: t0)
        #expect(plan.verdict == .applied)
        #expect(plan.order?.previousStatus == .cancelled)
        #expect(plan.order?.order.status == .fulfilled)
        // An old JWS uploaded to a new order is refused, the order FAILED; nothing is granted twice.
        store.openOrder("PAY2", Catalogue.pro, createdAt: t0 + 60)
        let old = store.apply(upload("PAY2"), tx("1001", Catalogue.pro, purchase: t0), now: t0)
        #expect(verdict(old) == "TRANSACTION_ALREADY_USED")
        #expect(old.failedOrder?.code == .transactionAlreadyUsed)
        #expect(store.balance == Credits.micro(3000))
    }

    @Test func refusalsThatMayPassLaterKeepTheOrderOpen() {
        var store = store()
        store.openOrder("PAY1", Catalogue.starter, createdAt: t0 - 60)
        let upload = FactSource.clientSubmission(orderNo: "PAY1", submitter: "alice")
        // Bob's purchase uploaded by alice: an account conflict, for an operator to resolve.
        let bobs = tx("2000", purchase: t0, original: "2000", token: "6f1c1e2a-0000-4000-8000-00000000000b")
        let conflict = store.apply(upload, bobs, now: t0)
        #expect(conflict.verdict == .accountConflict(attributed: "bob", other: "alice"))
        #expect(conflict.failedOrder == nil)
        #expect(conflict.events.map(\.type) == [.accountConflict])
        #expect(conflict.events.first?.userID == "bob")
        #expect(conflict.events.first?.data["otherUserId"] == .string("alice"))
        // A frozen chain: unfrozen, the same upload may pass.
        store.apply(initialBuy, tx("1000", purchase: t0 - 2 * day), now: t0)
        store.subscription?.frozenReason = "ACCOUNT_CONFLICT"
        let frozen = store.apply(upload, tx("1001", purchase: t0, reason: "RENEWAL"), now: t0)
        #expect(frozen.verdict == .refused(code: "CHAIN_FROZEN", reason: "ACCOUNT_CONFLICT"))
        #expect(frozen.failedOrder == nil && frozen.events.isEmpty)
        #expect(store.orders.first { $0.orderNo == "PAY1" }?.status == .created)
    }

    @Test func aRevokedTransactionNeverFulfilsAnOrder() {
        var store = store()
        store.openOrder("PAY1", Catalogue.starter, createdAt: t0 - 60)
        let purchase = tx("1000", purchase: t0)
        var refunded = purchase
        refunded.revocationDate = t0 + day
        refunded.signedDate = t0 + day
        // The refund arrives first, then the purchase it refunds.
        #expect(store.apply(.notification(type: "REFUND", subtype: nil), refunded, now: t0 + day).order == nil)
        let late = store.apply(initialBuy, purchase, now: t0 + day)
        #expect(late.verdict == .applied)
        #expect(late.order == nil && late.grants.isEmpty)
        #expect(late.failedOrder?.code == .transactionRevoked)
        #expect(late.events.filter { $0.type == .orderFailed }.map(\.key) == ["order.failed:PAY1"])
        #expect(store.orders.map(\.status) == [.failed])
        // Without an open order, no RECOVERY order is made for it either; the upload of it is refused.
        var bare = self.store()
        bare.apply(.notification(type: "REFUND", subtype: nil), refunded, now: t0 + day)
        #expect(bare.apply(initialBuy, purchase, now: t0 + day).order == nil)
        #expect(bare.orders.isEmpty && bare.lots.isEmpty)
        bare.openOrder("PAY2", Catalogue.starter, createdAt: t0 - 60)
        let upload = bare.apply(.clientSubmission(orderNo: "PAY2", submitter: "alice"), purchase, now: t0 + day)
        #expect(upload.verdict == .refused(code: "TRANSACTION_REVOKED", reason: "a revoked transaction fulfils no order"))
        #expect(bare.orders.map(\.status) == [.failed])
    }

    @Test func refundRevokesWhatRemainsAndReversalRestoresIt() {
        var store = store()
        let purchase = tx("1000", purchase: t0)
        store.apply(initialBuy, purchase, now: t0)
        let used = store.use(Credits.micro(400))
        #expect(used)
        var refunded = purchase
        refunded.revocationDate = t0 + 2 * day
        refunded.signedDate = t0 + 2 * day
        let refund = store.apply(.notification(type: "REFUND", subtype: nil), refunded, now: t0 + 2 * day)
        #expect(refund.revocations.map(\.grantKey) == ["period:Sandbox:1000"])
        #expect(refund.subscription?.state.status == .revoked)
        #expect(store.balance == 0)
        #expect(store.grants["period:Sandbox:1000"]?.record.unrecoverableAmount == Credits.micro(400))
        // Delivered again: nothing more to take.
        #expect(store.apply(.notification(type: "REFUND", subtype: nil), refunded, now: t0 + 2 * day).revocations.isEmpty)
        var reversed = purchase
        reversed.signedDate = t0 + 3 * day
        let reversal = store.apply(.notification(type: "REFUND_REVERSED", subtype: nil), reversed, now: t0 + 3 * day)
        #expect(reversal.restorations.count == 1)
        #expect(reversal.subscription?.state.status == .active)
        #expect(store.balance == Credits.micro(600))
        // The older refund arriving late does not undo the reversal.
        let late = store.apply(.notification(type: "REFUND", subtype: nil), refunded, now: t0 + 3 * day)
        #expect(late.storeTransaction == nil && late.revocations.isEmpty)
    }

    /// A credit pack bought twice (`ONE_TIME_CHARGE`, each purchase its own transaction and
    /// original id): one PERMANENT lot per purchase, once each, no subscription; a refund of one
    /// takes what remains of its own lot only.
    @Test func aCreditPackGrantsPermanentCreditsOncePerPurchase() {
        var store = store()
        let charge = FactSource.notification(type: "ONE_TIME_CHARGE", subtype: nil)
        var first = tx("7001", Catalogue.pack, purchase: t0, original: "7001")
        first.expiresDate = nil
        var second = tx("7002", Catalogue.pack, purchase: t0 + day, original: "7002")
        second.expiresDate = nil
        let bought = store.apply(charge, first, now: t0)
        #expect(
            bought.grants == [
                GrantDecision(grantKey: "purchase:Sandbox:7001", pool: .permanent, amount: Credits.micro(500), reason: "CONSUMABLE")
            ])
        #expect(bought.subscription == nil && bought.order?.order.type == .recovery)
        #expect(store.apply(charge, first, now: t0).grants.isEmpty, "once per transaction")
        store.apply(charge, second, now: t0 + day)
        #expect(store.balance(.permanent) == Credits.micro(1000))
        let used = store.use(Credits.micro(600))
        #expect(used)
        var refunded = first
        refunded.revocationDate = t0 + 2 * day
        refunded.signedDate = t0 + 2 * day
        let refund = store.apply(.notification(type: "REFUND", subtype: nil), refunded, now: t0 + 2 * day)
        #expect(refund.revocations.map(\.grantKey) == ["purchase:Sandbox:7001"])
        #expect(refund.subscription == nil)
        #expect(store.balance(.permanent) == Credits.micro(400), "the first pack was used up; the second keeps its 400")
        #expect(store.subscription == nil)
    }

    @Test func upgradesSwitchAtOnceWithAChangeOrderAndTheDifference() {
        var store = store()
        store.apply(initialBuy, tx("1000", purchase: t0), now: t0)
        let upgrade = store.apply(
            .notification(type: "DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE"), tx("1001", Catalogue.pro, purchase: t0 + 5 * day),
            now: t0 + 5 * day)
        #expect(upgrade.order?.order.type == .change)
        #expect(upgrade.grants.map(\.amount) == [Credits.micro(2000)])
        #expect(upgrade.grants.first?.reason == "UPGRADE")
        #expect(store.subscription?.state.activeProductID == Catalogue.pro.productID)
        // A downgrade is only a pending product.
        let downgrade = RenewalFact(
            environment: "Sandbox", originalTransactionID: "1000", productID: Catalogue.pro.productID,
            autoRenewProductID: Catalogue.starter.productID, autoRenewEnabled: true, signedDate: t0 + 6 * day)
        let pending = store.apply(
            .notification(type: "DID_CHANGE_RENEWAL_PREF", subtype: "DOWNGRADE"), nil, downgrade, now: t0 + 6 * day)
        #expect(pending.order == nil && pending.grants.isEmpty)
        #expect(store.subscription?.state.pendingProductID == Catalogue.starter.productID)
        #expect(store.subscription?.state.activeProductID == Catalogue.pro.productID)
    }

    /// A same-level, same-duration switch is applied by Apple at once (as `DID_CHANGE_RENEWAL_PREF`
    /// / `UPGRADE`): it grants at most the difference, and switching back and forth within the
    /// period grants nothing twice; the next renewal is a new period with its full amount.
    @Test func sameLevelSwitchesGrantTheDifferenceOncePerPeriod() {
        var store = store()
        let change = FactSource.notification(type: "DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE")
        store.apply(initialBuy, tx("1000", purchase: t0), now: t0)
        #expect(store.balance == Credits.micro(1000))
        let toTeam = store.apply(change, tx("1001", Catalogue.team, purchase: t0 + 5 * day), now: t0 + 5 * day)
        #expect(toTeam.order?.order.type == .change)
        #expect(toTeam.grants.map(\.amount) == [Credits.micro(200)])
        #expect(toTeam.grants.map(\.reason) == ["CROSSGRADE"])
        #expect(store.subscription?.state.activeProductID == Catalogue.team.productID)
        let back = store.apply(change, tx("1002", Catalogue.starter, purchase: t0 + 6 * day), now: t0 + 6 * day)
        #expect(back.order?.order.type == .change)
        #expect(back.grants.isEmpty, "starter is below what the period was already given")
        let again = store.apply(change, tx("1003", Catalogue.team, purchase: t0 + 7 * day), now: t0 + 7 * day)
        #expect(again.grants.isEmpty, "the difference to team was granted once in this period")
        #expect(store.balance == Credits.micro(1200))
        #expect(store.subscription?.state.activeProductID == Catalogue.team.productID)
        let renewal = store.apply(
            didRenew, tx("1004", Catalogue.team, purchase: t0 + 37 * day, reason: "RENEWAL"), now: t0 + 37 * day)
        #expect(renewal.grants.map(\.amount) == [Credits.micro(1200)])
        #expect(store.balance == Credits.micro(2400))
    }

    /// An upgrade after same-level switches counts what the period was given by all of them.
    @Test func aDifferenceUpgradeAfterSwitchesSubtractsTheHighestPlanOfThePeriod() {
        var store = store()
        let change = FactSource.notification(type: "DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE")
        store.apply(initialBuy, tx("1000", Catalogue.team, purchase: t0), now: t0)
        store.apply(change, tx("1001", Catalogue.starter, purchase: t0 + day), now: t0 + day)
        let upgrade = store.apply(change, tx("1002", Catalogue.pro, purchase: t0 + 2 * day), now: t0 + 2 * day)
        #expect(upgrade.grants.map(\.reason) == ["UPGRADE"])
        #expect(upgrade.grants.map(\.amount) == [Credits.micro(3000 - 1200)])
        #expect(store.balance == Credits.micro(3000))
    }

    /// A same-level switch to another duration happens at the renewal: a new period, in full.
    @Test func aSwitchToAnotherDurationIsARenewalOfTheNewProduct() {
        var store = store()
        store.apply(initialBuy, tx("1000", Catalogue.pro, purchase: t0), now: t0)
        let renewal = store.apply(
            didRenew, tx("1001", Catalogue.proYearly, purchase: t0 + 30 * day, days: 365, reason: "RENEWAL"), now: t0 + 30 * day)
        #expect(renewal.order?.order.type == .renewal)
        #expect(renewal.grants.map(\.amount) == [Credits.micro(3000)])
        #expect(renewal.grants.map(\.grantKey) == ["period:Sandbox:1001:m0"])
    }

    @Test func familySharingIsASeparateEntitlementWithoutAnOrder() {
        var store = store()
        var shared = tx("3000", purchase: t0, original: "3000")
        shared.ownershipType = "FAMILY_SHARED"
        let plan = store.apply(initialBuy, shared, now: t0)
        #expect(plan.verdict == .applied)
        #expect(plan.order == nil)
        #expect(plan.grants.isEmpty, "the catalogue does not grant credits to family members")
        #expect(plan.subscription?.state.isFamilyShared == true)
        var revoked = shared
        revoked.revocationDate = t0 + day
        revoked.signedDate = t0 + day
        #expect(store.apply(.notification(type: "REVOKE", subtype: nil), revoked, now: t0 + day).subscription?.state.status == .revoked)
    }

    @Test func unknownAndRecordOnlyTypesChangeNothing() {
        let store = store()
        for type in ["TEST", "REFUND_DECLINED", "SOMETHING_APPLE_ADDS", "CONSUMPTION_REQUEST"] {
            let plan = FulfillmentPlanner.plan(store.input(.notification(type: type, subtype: nil), tx("1000", purchase: t0), now: t0))
            guard case .recorded = plan.verdict else {
                Issue.record("\(type) gave \(plan.verdict)")
                continue
            }
            #expect(plan.storeTransaction == nil && plan.subscription == nil)
        }
    }

    /// A purchase, two renewals, a billing failure, a refund and its reversal, in every arrival
    /// order: the same subscription row, the same orders and the same balance.
    @Test func everyArrivalOrderEndsInTheSameState() {
        let purchase = tx("1000", purchase: t0)
        let renewal = tx("1001", purchase: t0 + 30 * day, reason: "RENEWAL", signed: t0 + 30 * day)
        var refunded = renewal
        refunded.revocationDate = t0 + 35 * day
        refunded.signedDate = t0 + 35 * day
        var reversed = renewal
        reversed.signedDate = t0 + 36 * day
        let failure = RenewalFact(
            environment: "Sandbox", originalTransactionID: "1000", productID: Catalogue.starter.productID,
            autoRenewProductID: Catalogue.starter.productID, autoRenewEnabled: true, isInBillingRetryPeriod: true,
            signedDate: t0 + 29 * day)
        let events: [(FactSource, TransactionFact?, RenewalFact?)] = [
            (initialBuy, purchase, nil), (didRenew, renewal, nil),
            (.notification(type: "DID_FAIL_TO_RENEW", subtype: nil), purchase, failure),
            (.notification(type: "REFUND", subtype: nil), refunded, nil),
            (.notification(type: "REFUND_REVERSED", subtype: nil), reversed, nil),
        ]
        let now = t0 + 40 * day
        var reference: (SubscriptionState?, [String], MicroCredits)?
        for permutation in permutations(Array(events.indices)) {
            var store = store()
            for index in permutation {
                let (source, transaction, renewalInfo) = events[index]
                store.apply(source, transaction, renewalInfo, now: now)
            }
            let outcome = (store.subscription?.state, store.orders.map(\.orderNo).sorted(), store.balance)
            if let reference {
                #expect(outcome.0 == reference.0, "order \(permutation)")
                #expect(outcome.1 == reference.1, "order \(permutation)")
                #expect(outcome.2 == reference.2, "order \(permutation)")
            } else {
                reference = outcome
                #expect(outcome.0?.status == .active)
                #expect(outcome.1 == ["RCV-S-1000", "RNW-S-1001"])
                #expect(outcome.2 == Credits.micro(2000))
            }
        }
    }

    /// Every replay of a chain's facts in any order gives the same balances: plan changes inside
    /// one period (same-level switches back and forth, an upgrade by difference, an upgrade in
    /// full) and a renewal, in every arrival order through the planner.
    static let replayedRuns: [(name: String, plans: [CatalogueProduct], expected: Int64)] = [
        ("switches", [Catalogue.starter, Catalogue.team, Catalogue.starter, Catalogue.team], 1200 + 1200),
        ("difference upgrade", [Catalogue.team, Catalogue.starter, Catalogue.pro], 3000 + 3000),
        ("full upgrade", [Catalogue.starter, Catalogue.proYearly], 1000 + 3000 + 3000),
    ]

    @Test(arguments: 0..<3)
    func planChangesGrantTheSameInEveryArrivalOrder(run: Int) {
        let (name, plans, expected) = Self.replayedRuns[run]
        let change = FactSource.notification(type: "DID_CHANGE_RENEWAL_PREF", subtype: "UPGRADE")
        var events: [(FactSource, TransactionFact)] = plans.enumerated().map { index, product in
            (
                index == 0 ? initialBuy : change,
                tx(
                    "10\(index)", product, purchase: t0 + Double(index) * day, days: product.duration == .year ? 365 : 30,
                    original: "100")
            )
        }
        let last = plans.last!
        events.append(
            (didRenew, tx("109", last, purchase: t0 + (last.duration == .year ? 365 : 30) * day, reason: "RENEWAL", original: "100")))
        var balances: Set<MicroCredits> = []
        for permutation in permutations(Array(events.indices)) {
            var store = store()
            for index in permutation { store.apply(events[index].0, events[index].1, now: t0 + 2 * day) }
            balances.insert(store.balance)
            #expect(store.balance == Credits.micro(expected), "\(name): order \(permutation)")
        }
        #expect(balances.count == 1, "\(name)")
    }

    /// A purchase of the same plan after its period was refunded is a new purchase, in full.
    @Test func aPurchaseAfterARefundOfTheSamePlanGrantsInFull() {
        var store = store()
        let purchase = tx("1000", purchase: t0)
        store.apply(initialBuy, purchase, now: t0)
        var refunded = purchase
        refunded.revocationDate = t0 + day
        refunded.signedDate = t0 + day
        store.apply(.notification(type: "REFUND", subtype: nil), refunded, now: t0 + day)
        let again = store.apply(initialBuy, tx("1001", purchase: t0 + 2 * day, original: "1000"), now: t0 + 2 * day)
        #expect(again.grants.map(\.amount) == [Credits.micro(1000)])
        #expect(store.balance == Credits.micro(1000))
    }

    /// A refund of a period and a purchase of the same plan after it, in every arrival order: one
    /// paid period, one period's credits (the purchase known first was taken for a switch back and
    /// granted nothing; the refund then frees its grant).
    @Test func aRefundAndARepurchaseOfTheSamePlanGrantOnePeriodInEveryArrivalOrder() {
        let purchase = tx("1000", purchase: t0)
        var refunded = purchase
        refunded.revocationDate = t0 + day
        refunded.signedDate = t0 + day
        let events: [(FactSource, TransactionFact)] = [
            (initialBuy, purchase), (.notification(type: "REFUND", subtype: nil), refunded),
            (initialBuy, tx("1001", purchase: t0 + 2 * day, original: "1000")),
        ]
        for permutation in permutations(Array(events.indices)) {
            var store = store()
            for index in permutation { store.apply(events[index].0, events[index].1, now: t0 + 3 * day) }
            #expect(store.balance == Credits.micro(1000), "order \(permutation)")
            #expect(store.lots.filter { $0.record.remaining > 0 }.map(\.transactionID) == ["1001"], "order \(permutation)")
        }
    }

    func permutations<T>(_ items: [T]) -> [[T]] {
        guard items.count > 1 else { return [items] }
        return items.indices.flatMap { i -> [[T]] in
            var rest = items
            let head = rest.remove(at: i)
            return permutations(rest).map { [head] + $0 }
        }
    }
}
