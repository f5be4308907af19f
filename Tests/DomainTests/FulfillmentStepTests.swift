import Foundation
import Testing

@testable import Domain

/// The planner's steps one at a time, each on an input built for it (`now` included), so a rule
/// that breaks is named by the step whose test fails rather than by a whole plan.
@Suite struct FulfillmentStepTests {
    let t0 = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01T00:00:00Z
    let day: TimeInterval = 86_400
    let token = "6f1c1e2a-0000-4000-8000-000000000001"
    let alice = UserRecord(userID: "alice", isTestUser: false)
    let bob = UserRecord(userID: "bob", isTestUser: true)
    let initialBuy = FactSource.notification(type: "SUBSCRIBED", subtype: "INITIAL_BUY")

    func tx(
        _ id: String, _ product: CatalogueProduct = Catalogue.starter, purchase: Date, token: String?, signed: Date? = nil,
        environment: String = "Sandbox", familyShared: Bool = false
    ) -> TransactionFact {
        var fact = TransactionFact(
            environment: environment, transactionID: id, originalTransactionID: "1000", productID: product.productID,
            purchaseDate: purchase, expiresDate: purchase + 30 * day, transactionReason: "PURCHASE", appAccountToken: token,
            signedDate: signed ?? purchase)
        if familyShared { fact.ownershipType = "FAMILY_SHARED" }
        return fact
    }

    func input(
        _ transaction: TransactionFact, source: FactSource? = nil, tokenUser: UserRecord? = nil, binding: ChainBindingRecord? = nil,
        subscription: SubscriptionRecord? = nil, stored: ChainFacts = ChainFacts(), everyoneIsTestUser: Bool = true, now: Date
    ) -> FulfillmentInput {
        FulfillmentInput(
            source: source ?? initialBuy, transaction: transaction, renewal: nil, tokenUser: tokenUser, binding: binding,
            subscription: subscription, catalogue: Catalogue.all, stored: stored, everyoneIsTestUser: everyoneIsTestUser, now: now)
    }

    func subscription(of owner: UserRecord, _ facts: [TransactionFact], now: Date, frozen: String? = nil) throws -> SubscriptionRecord {
        var chain = ChainFacts()
        for fact in facts { chain.record(fact) }
        return SubscriptionRecord(owner: owner, state: try #require(SubscriptionProjection.project(chain, now: now)), frozenReason: frozen)
    }

    @Test func attributionFollowsTheTokenThenTheChainThenTheBinding() throws {
        let purchase = tx("1000", purchase: t0, token: token)
        #expect(FulfillmentPlanner.attribute(input(purchase, tokenUser: alice, now: t0))?.user == alice)
        // A token this system never issued names nobody, and nothing else does.
        #expect(FulfillmentPlanner.attribute(input(purchase, now: t0)) == nil)
        // A later fact without a token stays with the chain's owner, even against a binding.
        let owned = try subscription(of: alice, [purchase], now: t0)
        let tokenless = tx("1001", purchase: t0 + 30 * day, token: nil)
        let bound = ChainBindingRecord(userID: "bob", isTestUser: true, overridesTokens: false)
        #expect(FulfillmentPlanner.attribute(input(tokenless, binding: bound, subscription: owned, now: t0 + 30 * day))?.user == alice)
        #expect(FulfillmentPlanner.attribute(input(tokenless, binding: bound, now: t0 + 30 * day))?.user == bob)
        // An operator's resolution outranks the token.
        let resolved = ChainBindingRecord(userID: "bob", isTestUser: true, overridesTokens: true)
        #expect(FulfillmentPlanner.attribute(input(purchase, tokenUser: alice, binding: resolved, now: t0))?.user == bob)
    }

    @Test func aFamilyMembersOwnUploadAttributesToThemAndBindsTheChain() {
        let shared = tx("1000", purchase: t0, token: nil, familyShared: true)
        let upload = FactSource.observedSubmission(submitter: "carol")
        let attribution = FulfillmentPlanner.attribute(input(shared, source: upload, now: t0))
        #expect(attribution?.user.userID == "carol")
        #expect(attribution?.familyMember == "carol")
        // The purchaser's own upload of a non-shared transaction binds nothing.
        #expect(FulfillmentPlanner.attribute(input(tx("1000", purchase: t0, token: nil), source: upload, now: t0)) == nil)
    }

    @Test func theSandboxGateLetsOnlyTestUsersThroughOnAProductionDeployment() {
        let sandbox = tx("1000", purchase: t0, token: token)
        let refused = FulfillmentVerdict.refused(code: "SANDBOX_REFUSED", reason: "Sandbox facts only touch test users")
        #expect(FulfillmentPlanner.gate(input(sandbox, everyoneIsTestUser: false, now: t0), user: alice) == refused)
        #expect(FulfillmentPlanner.gate(input(sandbox, everyoneIsTestUser: false, now: t0), user: bob) == nil)
        #expect(FulfillmentPlanner.gate(input(sandbox, everyoneIsTestUser: true, now: t0), user: alice) == nil)
        let production = tx("1000", purchase: t0, token: token, environment: "Production")
        #expect(FulfillmentPlanner.gate(input(production, everyoneIsTestUser: false, now: t0), user: alice) == nil)
    }

    @Test func anotherClaimantIsAConflictAndAFrozenChainRefusesEverything() throws {
        let purchase = tx("1000", purchase: t0, token: token)
        #expect(FulfillmentPlanner.conflicts(input(purchase, now: t0), user: alice) == nil)
        let bobs = try subscription(of: bob, [purchase], now: t0)
        let conflict = try #require(FulfillmentPlanner.conflicts(input(purchase, subscription: bobs, now: t0), user: alice))
        #expect(conflict.verdict == .accountConflict(attributed: "alice", other: "bob"))
        #expect(conflict.freezeChain)
        let frozen = try subscription(of: alice, [purchase], now: t0, frozen: "two accounts")
        let refusal = try #require(FulfillmentPlanner.conflicts(input(purchase, subscription: frozen, now: t0), user: alice))
        #expect(refusal.verdict == .refused(code: "CHAIN_FROZEN", reason: "two accounts"))
        #expect(!refusal.freezeChain)
    }

    @Test func onlyNewerFactsAreStoredButTheChainAlwaysHasThem() {
        let first = tx("1000", purchase: t0, token: token, signed: t0 + day)
        var stored = ChainFacts()
        stored.record(first)
        let older = tx("1000", purchase: t0, token: token, signed: t0)
        let late = FulfillmentPlanner.facts(input(older, stored: stored, now: t0 + 2 * day))
        #expect(late.newTransaction == nil)
        #expect(late.chain.transactions == [first])
        let renewal = tx("1001", purchase: t0 + 30 * day, token: token)
        let next = FulfillmentPlanner.facts(input(renewal, stored: stored, now: t0 + 30 * day))
        #expect(next.newTransaction == renewal)
        #expect(next.chain.transactions.count == 2)
    }

    @Test func theProjectionChangesOnlyWhenTheStateDoesAtNow() throws {
        let purchase = tx("1000", purchase: t0, token: token)
        var chain = ChainFacts()
        chain.record(purchase)
        let fresh = try #require(
            FulfillmentPlanner.projection(input(purchase, now: t0 + day), chain: chain, product: Catalogue.starter, user: alice))
        #expect(fresh.state.status == .active)
        #expect(fresh.previousStatus == nil)
        #expect(fresh.subscriptionGroupID == Catalogue.group)
        let stored = SubscriptionRecord(owner: alice, state: fresh.state)
        let unchanged = input(purchase, subscription: stored, now: t0 + day)
        #expect(FulfillmentPlanner.projection(unchanged, chain: chain, product: Catalogue.starter, user: alice) == nil)
        // The same facts read after the period ended: the stored row is no longer current.
        let later = try #require(
            FulfillmentPlanner.projection(
                input(purchase, subscription: stored, now: t0 + 40 * day), chain: chain, product: Catalogue.starter, user: alice))
        #expect(later.state.status != .active)
        #expect(later.previousStatus == .active)
        // A credit pack is no subscription.
        let pack = tx("2000", Catalogue.pack, purchase: t0, token: token)
        var packChain = ChainFacts()
        packChain.record(pack)
        #expect(FulfillmentPlanner.projection(input(pack, now: t0), chain: packChain, product: Catalogue.pack, user: alice) == nil)
    }

    @Test func historyRecordsAnOrderInTwoStepsAndOnlyRealStatusChanges() throws {
        let purchase = tx("1000", purchase: t0, token: token)
        var chain = ChainFacts()
        chain.record(purchase)
        let order = OrderChange(
            order: OrderRecord(
                orderNo: "ORD-1", userID: "alice", productID: Catalogue.starter.productID, type: .initial, status: .fulfilled,
                transactionID: "1000", createdAt: t0),
            isNew: false, previousStatus: .created, originalTransactionID: "1000", environment: "Sandbox",
            subscriptionGroupID: Catalogue.group)
        let active = try #require(SubscriptionProjection.project(chain, now: t0 + day))
        let started = SubscriptionChange(state: active, userID: "alice", subscriptionGroupID: Catalogue.group, previousStatus: nil)
        let rows = FulfillmentPlanner.history(order: order, subscription: started, cause: "apple.SUBSCRIBED.INITIAL_BUY")
        #expect(rows.map(\.entity) == [.order, .order, .subscription])
        #expect(rows.map(\.current) == ["VERIFIED", "FULFILLED", "ACTIVE"])
        #expect(rows.map(\.previous) == [OrderStatus.created.rawValue, "VERIFIED", nil])
        #expect(rows.allSatisfy { $0.cause == "apple.SUBSCRIBED.INITIAL_BUY" })
        // A new renewal date with the status unchanged writes the row but no history.
        var renewed = started
        renewed.previousStatus = .active
        #expect(FulfillmentPlanner.history(order: nil, subscription: renewed, cause: "apple.DID_RENEW").isEmpty)
    }
}
