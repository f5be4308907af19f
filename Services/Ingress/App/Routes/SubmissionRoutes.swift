import AppStore
import Crypto
import Domain
import Events
import Foundation
import HTTPServer
import Pipeline
import ServiceRuntime
import Storage

/// Signed transactions from StoreKit clients: uploaded for an order
/// (`POST …/orders/{orderNo}/apple-transaction`) or observed in `Transaction.updates`
/// (`POST …/apple-transactions/observed`). Verified here, stored, published to the same
/// processing path as notifications, then awaited a bounded time for the worker's result.
struct SubmissionRoutes: Sendable {
    let events: EventStore
    let intake: NotificationIntake
    let orders: OrderStore
    let users: UserStore
    let subscriptions: SubscriptionStore
    let verifier: SignedDataVerifier
    let cipher: PayloadCipher
    let waiter: FulfillmentWaiter
    /// The deployment's environment (a transaction of the other one is refused).
    let environment: AppStoreEnvironment
    /// How long an upload waits for the worker before answering 202.
    let fulfillmentWait: Duration
    let refusals: ThrottledLog
    let clock: any WallClock
    let logger: Logger

    func register(in api: inout RouterGroup<IngressRequestContext>) {
        api.post("subscriptions/orders/{orderNo}/apple-transaction") { request, context in
            try await submit(request, user: try context.requireUser(), orderNo: request.pathParameter("orderNo") ?? "")
        }
        api.post("subscriptions/apple-transactions/observed") { request, context in
            try await submit(request, user: try context.requireUser(), orderNo: nil)
        }
    }

    struct Body: Decodable {
        let signedTransaction: String
    }

    /// The fulfilled result of a submission (domain.md's REST contract); fields without a value
    /// are written as null.
    struct Result: Encodable {
        @ExplicitNull var orderNo: String?
        @ExplicitNull var orderStatus: String?
        let transactionId: String
        @ExplicitNull var subscriptionStatus: String?
        @ExplicitNull var activeProductId: String?
        @ExplicitNull var expiresAt: Date?
        let creditsBalance: Int64
        /// Whether the order is FULFILLED: what the StoreKit client checks before `finish()`.
        let fulfilled: Bool
    }

    /// `202 FULFILLMENT_PENDING`: the error shape every endpoint uses, plus what is known of the
    /// submission, so a client decoding it as a result sees an order that is not FULFILLED yet.
    struct Pending: Encodable {
        let code: String
        let message: String
        let traceId: String
        @ExplicitNull var orderNo: String?
        @ExplicitNull var orderStatus: String?
        let transactionId: String
        let fulfilled = false
    }

    func submit(_ request: HTTPRequest, user: AuthenticatedUser, orderNo: String?) async throws -> HTTPResponse {
        let body = try request.decodeJSON(Body.self)
        let transaction = try await verify(body.signedTransaction)
        guard let transactionID = transaction.transactionId, let originalID = transaction.originalTransactionId,
            let productID = transaction.productId, let environment = transaction.rawEnvironment
        else { throw APIError.transactionInvalid("the transaction lacks its identifiers") }

        var order: StoredOrder?
        if let orderNo { order = try await checkOrder(orderNo, user: user, transactionID: transactionID) }
        let owner = try await users.owner(
            ofTransaction: transactionID, originalTransactionID: originalID, environment: environment,
            appAccountToken: transaction.appAccountToken)
        let ownedByAnother = owner.map { $0 != user.userID } ?? false
        if let order, order.productID != productID {
            // The user's own purchase of another product can never complete this order; another
            // account's is an account conflict, which leaves the order open.
            let reason = "the transaction is for another product than the order"
            if !ownedByAnother {
                try await orders.failForUpload(
                    order.orderNo, userID: user.userID, code: .productMismatch, reason: reason, transactionID: transactionID,
                    environment: environment, now: clock.now())
            }
            throw APIError.transactionInvalid(reason)
        }
        // Another account's purchase uploaded for an order is refused; observed (a restore on a
        // shared device, an account switch) it is still kept and applied to its owner below.
        if ownedByAnother, orderNo != nil { throw accountConflict(transactionID) }
        if !ownedByAnother,
            let existing = try await existingResult(transactionID: transactionID, environment: environment, orderNo: orderNo, user: user)
        {
            return .json(existing)
        }
        if let orderNo, let expires = transaction.expiresDate, expires <= clock.now() {
            let reason = "an expired transaction cannot fulfil a new order"
            try await orders.failForUpload(
                orderNo, userID: user.userID, code: .transactionExpired, reason: reason, transactionID: transactionID,
                environment: environment, now: clock.now())
            throw APIError.transactionExpired(reason)
        }

        let hash = SignedContent.hash(of: body.signedTransaction)
        let sealed = try cipher.seal(Array(body.signedTransaction.utf8), context: "submission:" + hash)
        let stored = try await events.insertSubmission(
            NewSubmission(
                kind: orderNo == nil ? "OBSERVED" : "CLIENT", userID: user.userID, orderNo: orderNo,
                environment: environment, transactionID: transactionID, originalTransactionID: originalID,
                payloadHash: hash, sealedPayload: sealed.sealed, payloadKeyID: sealed.keyID, traceID: request.traceID))
        if ownedByAnother {
            if let outbox = stored.outbox { await intake.publisher.publish([outbox]) }
            throw accountConflict(transactionID)
        }
        let key = EventCompletion.key(kind: .submission, id: stored.eventID)
        let ticket = waiter.register(key)
        if let outbox = stored.outbox { await intake.publisher.publish([outbox]) }
        let state = try await events.status(of: .submission, id: stored.eventID)
        if state?.status == "SUCCEEDED" || state?.status == "DEAD" {
            waiter.cancel(key, ticket: ticket)
        } else {
            _ = await waiter.wait(key, ticket: ticket, timeout: fulfillmentWait)
        }
        return try await answer(
            submissionID: stored.eventID, transactionID: transactionID, environment: environment, orderNo: orderNo, user: user,
            traceID: request.traceID)
    }

    /// Full verification of the client's JWS. A Production deployment takes Sandbox transactions
    /// too (test users; the worker enforces who may use them); a Sandbox one only Sandbox. Ids in
    /// another form than Apple's are refused here (400), before anything is stored.
    func verify(_ jws: String) async throws -> JWSTransactionDecodedPayload {
        let configured = environment
        let claimed = Self.environmentClaim(of: jws)
        let expected: AppStoreEnvironment =
            configured == .production && claimed == AppStoreEnvironment.sandbox.rawValue
            ? .sandbox : configured
        let transaction: JWSTransactionDecodedPayload
        do {
            transaction = try await verifier.verifyTransaction(jws, expectedEnvironment: expected)
        } catch {
            if error.isRetryable { throw APIError.serviceUnavailable("the transaction could not be verified now") }
            refuse("client transaction refused", reason: error.code.rawValue, ["error.reason": .string(error.reason)])
            throw APIError.transactionInvalid("the signed transaction was refused (\(error.code.rawValue))")
        }
        try checkForm(of: [transaction.transactionId, transaction.originalTransactionId])
        return transaction
    }

    /// 400 when one of `ids` is not in Apple's form (`AppleTransactionID`); absent ids are left
    /// to the caller, which knows which it needs.
    func checkForm(of ids: [String?]) throws(HTTPError) {
        guard ids.allSatisfy({ $0.map(AppleTransactionID.isValid) ?? true }) else {
            refuse("client upload refused: a transaction id is not in Apple's form", reason: "TRANSACTION_ID_INVALID")
            throw APIError.invalidRequest("transaction ids must be Apple's: 1 to \(AppleTransactionID.maxLength) digits")
        }
    }

    /// Counts a refused client upload by `reason` (an error code) and logs it, at most every 10 s per reason.
    func refuse(_ message: String, reason: String, _ metadata: Logger.Metadata = [:]) {
        MetricsRegistry.shared.counter(
            "subs_client_refusals_total", help: "Client uploads (signed transactions, app receipts) refused, by reason",
            labels: ["reason": reason]
        ).increment()
        refusals.record(message, reason: reason, metadata.merging(["error.code": .string(reason)]) { own, _ in own })
    }

    private func checkOrder(_ orderNo: String, user: AuthenticatedUser, transactionID: String) async throws -> StoredOrder {
        guard let order = try await orders.order(orderNo, userID: user.userID) else {
            throw APIError.notFound("no such order")
        }
        if let linked = order.transactionID, linked != transactionID {
            throw APIError.orderConflict("the order is already fulfilled by another transaction")
        }
        return order
    }

    /// A transaction belongs to the user of its appAccountToken (or of its chain): another business
    /// user uploading it is an account conflict, whoever is logged in. The caller learns nothing of
    /// the owner.
    private func accountConflict(_ transactionID: String) -> HTTPError {
        MetricsRegistry.shared.counter(
            "subs_account_conflicts_total", help: "Transactions submitted by another business user than their owner"
        ).increment()
        logger.warning("account conflict on a client submission", ["appstore.transaction_id": .string(transactionID)])
        return APIError.accountConflict("this purchase belongs to another account")
    }

    /// An already fulfilled transaction answers with its current result: re-uploads and restores
    /// never create anything new.
    private func existingResult(transactionID: String, environment: String, orderNo: String?, user: AuthenticatedUser) async throws -> Result? {
        guard let linkedOrder = try await orders.fulfilledOrderNo(environment: environment, transactionID: transactionID)
        else { return nil }
        if let orderNo, orderNo != linkedOrder {
            // An old JWS on a new order: the existing result, never a second grant.
            logger.info("transaction already fulfilled another order", ["order.no": .string(orderNo)])
        }
        return try await result(transactionID: transactionID, environment: environment, orderNo: linkedOrder, user: user)
    }

    private func answer(
        submissionID: Int64, transactionID: String, environment: String, orderNo: String?, user: AuthenticatedUser, traceID: String
    ) async throws -> HTTPResponse {
        let state = try await events.status(of: .submission, id: submissionID)
        if state?.status == "DEAD" {
            switch state?.errorCode {
            case "ACCOUNT_CONFLICT": throw APIError.accountConflict("this purchase belongs to another account")
            case "TRANSACTION_EXPIRED": throw APIError.transactionExpired("an expired transaction cannot fulfil a new order")
            case let code?: throw APIError.transactionInvalid("the transaction was not applied (\(code))")
            case nil: throw APIError.transactionInvalid("the transaction was not applied")
            }
        }
        let order = try await orders.linkedOrder(environment: environment, transactionID: transactionID)
        if orderNo == nil, state?.status == "SUCCEEDED" {
            let applied = try await subscriptions.purchaseResult(
                transactionID: transactionID, environment: environment, orderNo: order?.orderNo, userID: user.userID)
            // Applied to someone else's chain (another member bound this family access first).
            if let owner = applied.chainOwner, owner != user.userID { throw accountConflict(transactionID) }
            // A family member's shared access has no order: applied is fulfilled.
            if order == nil, applied.chainOwner != nil {
                return .json(
                    Result(
                        orderNo: nil, orderStatus: nil, transactionId: transactionID,
                        subscriptionStatus: applied.subscriptionStatus?.rawValue, activeProductId: applied.activeProductID,
                        expiresAt: applied.expiresAt, creditsBalance: Credits.whole(applied.balance), fulfilled: true))
            }
        }
        let resolvedOrder = order?.orderNo ?? orderNo
        let orderStatus = order?.status
        if state?.status != "SUCCEEDED" || orderStatus != .fulfilled {
            let pending = APIError.fulfillmentPending("the purchase is being processed; query the order for its result")
            // Not linked to the transaction yet: the uploaded-for order's own status (CREATED, PENDING…).
            var status = orderStatus
            if order == nil, let orderNo { status = try await orders.order(orderNo, userID: user.userID)?.status }
            return .json(
                Pending(
                    code: pending.code, message: pending.message, traceId: traceID, orderNo: resolvedOrder,
                    orderStatus: status?.rawValue, transactionId: transactionID),
                status: pending.status)
        }
        return .json(try await result(transactionID: transactionID, environment: environment, orderNo: resolvedOrder, user: user))
    }

    private func result(transactionID: String, environment: String, orderNo: String?, user: AuthenticatedUser) async throws -> Result {
        let result = try await subscriptions.purchaseResult(
            transactionID: transactionID, environment: environment, orderNo: orderNo, userID: user.userID)
        return Result(
            orderNo: result.orderNo, orderStatus: result.orderStatus?.rawValue, transactionId: transactionID,
            subscriptionStatus: result.subscriptionStatus?.rawValue, activeProductId: result.activeProductID,
            expiresAt: result.expiresAt, creditsBalance: Credits.whole(result.balance),
            fulfilled: result.orderStatus == .fulfilled)
    }

    /// The `environment` a JWS payload claims, read WITHOUT verifying it: it only chooses which
    /// environment to verify against, and verification then checks it.
    static func environmentClaim(of jws: String) -> String? {
        (JWSParts(jws)?.payloadJSON as? [String: Any])?["environment"] as? String
    }
}
