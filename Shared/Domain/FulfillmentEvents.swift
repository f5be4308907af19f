import Foundation

/// The outbound events of credit moves, whoever books them (fulfillment, the credit jobs, an
/// operator's adjustment): keyed by the grant, so booking it again adds nothing.
public enum CreditEvents {
    /// `credits.granted` for a lot booked under `grantKey`.
    public static func granted(
        userID: String, environment: String, grantKey: String, pool: CreditPool, amount: MicroCredits, reason: String,
        originalTransactionID: String?, transactionID: String?, now: Date
    ) -> OutboundEvent {
        event(
            .creditsGranted, key: "credits.granted:\(grantKey)", userID: userID, environment: environment, grantKey: grantKey,
            pool: pool, amount: amount, reason: reason, originalTransactionID: originalTransactionID,
            transactionID: transactionID, now: now)
    }

    /// `credits.revoked` for what a refund or a debit took; `step` names the taking (a lot is
    /// revoked again only after a reversal gave it back).
    public static func revoked(
        userID: String, environment: String, grantKey: String, step: String, pool: CreditPool, amount: MicroCredits,
        reason: String, originalTransactionID: String?, transactionID: String?, now: Date
    ) -> OutboundEvent {
        event(
            .creditsRevoked, key: "credits.revoked:\(grantKey):\(step)", userID: userID, environment: environment,
            grantKey: grantKey, pool: pool, amount: amount, reason: reason, originalTransactionID: originalTransactionID,
            transactionID: transactionID, now: now)
    }

    /// The same data for every credit event; `amount` is credits as a decimal string (exact) and
    /// `microCredits` the integer beside it.
    public static func event(
        _ type: OutboundEventType, key: String, userID: String, environment: String, grantKey: String?, pool: CreditPool,
        amount: MicroCredits, reason: String, originalTransactionID: String?, transactionID: String?, now: Date
    ) -> OutboundEvent {
        OutboundEvent(
            key: key, type: type, userID: userID, environment: environment, occurredAt: now,
            data: [
                "pool": .string(pool.rawValue), "amount": .string(Credits.decimal(amount)), "microCredits": .integer(amount),
                "grantKey": OutboundValue(grantKey), "reason": .string(reason),
                "originalTransactionId": OutboundValue(originalTransactionID), "transactionId": OutboundValue(transactionID),
            ])
    }
}

/// The outbound events of a fulfillment plan: the chain's change of state, the refund, the order
/// and the grants. Pure; keyed by the change, so a redelivered or replayed fact adds nothing.
///
/// Revocations and restorations are not here: what they take or give back is decided against the
/// lot as it is when written, so the writer names them (`CreditEvents`) with the amounts booked.
public enum FulfillmentEvents {
    /// The events of an applied plan (`chain`: the chain's facts with the event's recorded).
    static func applied(_ plan: FulfillmentPlan, input: FulfillmentInput, chain: ChainFacts) -> [OutboundEvent] {
        guard let user = plan.user?.userID else { return [] }
        var events: [OutboundEvent] = []
        if let change = plan.subscription {
            events += SubscriptionEvents.change(
                userID: user, from: input.subscription?.state, to: change.state,
                entitlements: { input.catalogue[$0]?.entitlements ?? [$0] }, now: input.now)
        }
        if case .notification("REFUND", _) = input.source, let fact = input.transaction,
            let refunded = chain.transactions.first(where: { $0.transactionID == fact.transactionID }),
            let revoked = refunded.revocationDate, input.catalogue[refunded.productID]?.kind == .autoRenewable
        {
            events.append(
                OutboundEvent(
                    key: "subscription.refunded:\(refunded.environment):\(refunded.transactionID)", type: .subscriptionRefunded,
                    userID: user, environment: refunded.environment, occurredAt: input.now,
                    data: [
                        "productId": .string(refunded.productID), "originalTransactionId": .string(refunded.originalTransactionID),
                        "transactionId": .string(refunded.transactionID), "revocationDate": OutboundValue(revoked),
                        "revocationPercentage": refunded.revocationPercentage.map { .integer(Int64($0)) } ?? .null,
                    ]))
        }
        if let change = plan.order {
            events.append(order(.orderFulfilled, change.order, environment: change.environment, extra: [:], now: input.now))
        }
        events += failed(plan.failedOrder, now: input.now)
        let fact = input.transaction
        let granted =
            plan.grants.map { (fact, $0) } + plan.freedGrants.map { (Optional($0.transaction), $0.decision) }
        for (source, decision) in granted {
            events.append(
                CreditEvents.granted(
                    userID: user, environment: source?.environment ?? fact?.environment ?? "Production",
                    grantKey: decision.grantKey, pool: decision.pool, amount: decision.amount, reason: decision.reason,
                    originalTransactionID: source?.originalTransactionID, transactionID: source?.transactionID, now: input.now))
        }
        return events
    }

    /// `order.failed` for an order the event ended FAILED: once per order (FAILED is final), with
    /// the stable failure code and the transaction that was refused for it.
    public static func failed(_ failure: OrderFailure?, now: Date) -> [OutboundEvent] {
        guard let failure else { return [] }
        var failed = order(
            .orderFailed, failure.order, environment: failure.environment,
            extra: ["code": .string(failure.code.rawValue), "reason": .string(failure.reason)], now: now)
        failed.data["transactionId"] = .string(failure.transactionID)
        return [failed]
    }

    /// `account.conflict` for a charge whose signed token names one user on a chain or
    /// transaction another user holds (a second account paying on the same Apple Account): the
    /// payer was charged and gets nothing until an operator acts, so their services hear of it;
    /// once per transaction and payer.
    static func accountConflict(_ input: FulfillmentInput, payer: String, other: String, chainFrozen: Bool) -> [OutboundEvent] {
        guard let fact = input.transaction else { return [] }
        return [
            OutboundEvent(
                key: "account.conflict:\(fact.environment):\(fact.transactionID):\(payer)", type: .accountConflict, userID: payer,
                environment: fact.environment, occurredAt: input.now,
                data: [
                    "productId": .string(fact.productID), "originalTransactionId": .string(fact.originalTransactionID),
                    "transactionId": .string(fact.transactionID), "otherUserId": .string(other),
                    "chainFrozen": .bool(chainFrozen), "cause": .string(input.source.cause),
                ])
        ]
    }

    private static func order(
        _ type: OutboundEventType, _ order: OrderRecord, environment: String, extra: [String: OutboundValue], now: Date
    ) -> OutboundEvent {
        OutboundEvent(
            key: "\(type.rawValue):\(order.orderNo)", type: type, userID: order.userID, environment: environment, occurredAt: now,
            data: [
                "orderNo": .string(order.orderNo), "productId": .string(order.productID), "status": .string(order.status.rawValue),
                "transactionId": OutboundValue(order.transactionID), "orderType": .string(order.type.rawValue),
            ].merging(extra) { $1 })
    }
}
