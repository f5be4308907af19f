import Domain
import Events
import Foundation
import Postgres
import Storage

extension FulfillmentStore {
    /// The verdicts that bury the event, each with what it records, in the batch's transaction.
    func refuse(_ pending: PendingEvent, _ plan: FulfillmentPlan, owner: String, on db: PostgresConnection)
        async throws
    {
        let event = pending.event
        switch plan.verdict {
        case .applied, .recorded:
            return
        case .unmatched(let reason):
            try await keepUnmatched(event, pending.verified, reason: reason, on: db)
            try await leases.fail(
                event, owner: owner, code: reason.rawValue,
                message: (plan.unattributedReason.map { $0 + "; " } ?? "") + "kept in unmatched_fact; replay after the fix",
                retryAt: nil, on: db)
        case .accountConflict(let attributed, let other):
            if plan.freezeChain, let chain = pending.facts {
                try await chains.freeze(environment: chain.environment, originalTransactionID: chain.original, on: db)
            }
            try await leases.fail(
                event, owner: owner, code: "ACCOUNT_CONFLICT",
                message: "attributed to user \(attributed), claimed by user \(other); chain frozen", retryAt: nil,
                on: db)
            if outboundEvents, !plan.events.isEmpty { try await OutboundEventStore(pool: pool).append(plan.events, on: db) }
        case .refused(let code, let reason):
            try await leases.fail(event, owner: owner, code: code, message: reason, retryAt: nil, on: db)
            if let failure = plan.failedOrder {
                try await OrderStore.fail(
                    failure, cause: pending.verified.source.cause, kind: event.kind.rawValue, eventID: event.id, on: db)
            }
            if outboundEvents, !plan.events.isEmpty { try await OutboundEventStore(pool: pool).append(plan.events, on: db) }
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
        try await leases.keepUnmatched(
            event, reason: reason.rawValue,
            summary: UnmatchedSummary(
                notificationType: type, subtype: subtype, transactionID: fact?.transactionID,
                originalTransactionID: fact?.originalTransactionID ?? verified.renewal?.originalTransactionID,
                productID: fact?.productID ?? verified.renewal?.productID, appAccountToken: fact?.appAccountToken,
                submittedBy: submitter),
            on: db)
    }
}
