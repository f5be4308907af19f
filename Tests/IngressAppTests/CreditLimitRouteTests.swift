import Foundation
import Postgres
import Testing

@testable import IngressApp

/// The security pass's finding through the routes: an operator's adjustment of
/// 9223372036854.775807 credits was accepted, and then another adjustment of 1 or a balance check
/// of that user killed the ingress. Now the adjustment is refused with a stable code and a balance
/// written before the bounds is read and spent without trapping.
@Suite(.timeLimit(.minutes(3)))
struct CreditLimitRouteTests {
    @Test func adjustmentsPastTheLimitsAre422AndBookNothing() async throws {
        try await AdminTestApp.with(extra: ["CREDITS_MAX_BALANCE": "20", "CREDITS_MAX_ADJUSTMENT": "15"]) { admin in
            try await admin.app.pool.query("INSERT INTO app_user (user_id) VALUES ('rich')")
            func adjust(_ amount: Any, _ number: String) async throws -> TestResponse {
                try await admin.act(
                    "/admin/v1/users/rich/credits/adjustments", ["pool": "PERMANENT", "amount": amount, "number": number, "reason": "test"])
            }
            for (amount, number) in [("9223372036854.775807", "A-0"), ("-9223372036854.775807", "A-0"), ("15.000001", "A-0")] {
                let refused = try await adjust(amount, number)
                #expect(refused.status == 422, "\(amount): \(refused.text)")
                #expect(refused.code == "AMOUNT_OUT_OF_RANGE", "\(amount)")
            }
            #expect(try await adjust("15", "A-1").status == 200)
            let past = try await adjust("5.000001", "A-2")
            #expect(past.status == 422 && past.code == "AMOUNT_OUT_OF_RANGE", "\(past.text)")
            #expect(try await adjust(5, "A-2").status == 200, "exactly the maximum")
            #expect(try await adjust("0.000001", "A-3").code == "AMOUNT_OUT_OF_RANGE")
            #expect(try await admin.count("SELECT count(*) FROM credit_adjustment") == 2)
            #expect(try await admin.count("SELECT count(*) FROM credit_ledger") == 2)
        }
    }

    @Test func aBalanceFromBeforeTheBoundsIsCheckedSpentAndRefusedMoreWithoutACrash() async throws {
        try await AdminTestApp.with { admin in
            let app = admin.app
            try await app.pool.query("INSERT INTO app_user (user_id) VALUES ('rich')")
            // What the accepted adjustment left: 2⁶³−1 micro-credits, beside another pool.
            try await app.pool.query(
                """
                INSERT INTO credit_account (user_id, pool, balance)
                VALUES ('rich', 'PERMANENT', 9223372036854775807), ('rich', 'WELCOME', 1000000)
                """)
            try await app.pool.query(
                """
                INSERT INTO credit_grant (grant_key, user_id, pool, amount, remaining, reason)
                VALUES ('legacy-p', 'rich', 'PERMANENT', 9223372036854775807, 9223372036854775807, 'ADJUSTMENT'),
                       ('legacy-w', 'rich', 'WELCOME', 1000000, 1000000, 'ADJUSTMENT')
                """)
            try await app.pool.query(
                "INSERT INTO credit_rate_version (code, version, micro_credits_per_unit, effective_from) VALUES ('call', 1, 1000000, 'epoch')")

            let check = await app.get("/api/v1/credits/check?userId=rich&units=1&rate=call", headers: app.serviceAuthorization)
            #expect(check.status == 200, "\(check.text)")
            #expect(try check.json()["affordable"] as? Bool == true)
            let usage = try await app.post(
                "/api/v1/credits/usage", json: ["idempotencyKey": "k1", "userId": "rich", "units": 2, "rate": "call"],
                headers: app.serviceAuthorization)
            #expect(usage.status == 200, "\(usage.text)")
            let more = try await admin.act(
                "/admin/v1/users/rich/credits/adjustments", ["pool": "PERMANENT", "amount": 1, "number": "A-1", "reason": "test"])
            #expect(more.status == 422 && more.code == "AMOUNT_OUT_OF_RANGE", "\(more.text)")
            let lookup = try await admin.get("/admin/v1/lookup?q=rich")
            #expect(lookup.status == 200, "the support case shows the balance: \(lookup.text)")
        }
    }
}
