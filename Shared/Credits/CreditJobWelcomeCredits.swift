import Domain
import Foundation
import Postgres
import ServiceRuntime

extension CreditJobs {
    /// Grants `WELCOME_CREDITS` once to every user without them yet (grant key `welcome:<user>`),
    /// into the WELCOME pool. Returns the number granted.
    @discardableResult
    public func grantWelcomeCredits(wait: Bool = true) async throws -> Int {
        let amount = Credits.micro(configuration.welcomeCredits)
        guard amount > 0 else { return 0 }
        let granted = try await repeatBatches(wait: wait) { db in
            let users = try await db.query(
                """
                SELECT u.user_id, 'welcome:' || u.user_id AS grant_key FROM app_user u
                 WHERE NOT EXISTS (SELECT 1 FROM credit_grant g WHERE g.grant_key = 'welcome:' || u.user_id)
                   AND NOT EXISTS (SELECT 1 FROM credit_grant_refusal r WHERE r.grant_key = 'welcome:' || u.user_id)
                 ORDER BY u.user_id LIMIT \(configuration.batchSize)
                """)
            var grants: [CreditGrant] = []
            for row in users {
                grants.append(
                    CreditGrant(
                        userID: try row.decode("user_id"),
                        decision: GrantDecision(grantKey: try row.decode("grant_key"), pool: .welcome, amount: amount, reason: "WELCOME")))
            }
            let (booked, refused) = try await ledger.grantRefusingOverLimit(grants, limits: configuration.limits, on: db)
            recordRefusals(refused)
            let refusedKeys = Set(refused.map(\.decision.grantKey))
            try await ledger.announceGranted(grants.filter { !refusedKeys.contains($0.decision.grantKey) }, now: Date(), on: db)
            // Refused grants count as done for this loop: they are recorded and not candidates again.
            return booked + refused.count
        }
        metrics.welcomeGrants.increment(by: granted)
        return granted
    }
}
