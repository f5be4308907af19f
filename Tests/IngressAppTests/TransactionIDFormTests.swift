import AppStore
import AppStoreTestSupport
import Foundation
import ServiceRuntime
import TestSupport
import Testing

@testable import IngressApp

/// Transaction ids are Apple's decimal strings: a client upload, an import or an admin action
/// naming one in another form is refused with 400 and leaves nothing behind.
@Suite(.timeLimit(.minutes(3)))
struct TransactionIDFormTests {
    static let markup = "<b>1</b>"

    static var refusals: Counter {
        MetricsRegistry.shared.counter(
            "subs_client_refusals_total", help: "Client uploads (signed transactions, app receipts) refused, by reason",
            labels: ["reason": "TRANSACTION_ID_INVALID"])
    }

    @Test func uploadsAndImportsWithIdsInAnotherFormAre400() async throws {
        try await IngressTestApp.with { app in
            try await app.rows.seedTwoPlanCatalogue()
            let order = try await app.createOrder("carol").json()
            let orderNo = try #require(order["orderNo"] as? String)
            let token = UUID(uuidString: try #require(order["appAccountToken"] as? String))
            let auth = app.authorized("carol")
            func signed(_ id: String, original: String? = nil) throws -> String {
                try app.signer.sign(
                    TestPayloads.transaction(
                        bundleId: IngressTestApp.bundleID, environment: .sandbox, productId: IngressTestApp.monthly,
                        transactionId: id, originalTransactionId: original, appAccountToken: token))
            }
            let receipt = try app.signer.signReceipt(
                TestAppReceipt(
                    bundleId: IngressTestApp.bundleID,
                    inAppPurchases: [.init(productId: IngressTestApp.monthly, transactionId: Self.markup, originalTransactionId: "1000")]))
            let refusedBefore = Self.refusals.value

            let cases: [(String, String, [String: Any])] = [
                ("upload for an order", "/api/v1/subscriptions/orders/\(orderNo)/apple-transaction", ["signedTransaction": try signed(Self.markup)]),
                ("observed upload", "/api/v1/subscriptions/apple-transactions/observed", ["signedTransaction": try signed("2000", original: "20O0")]),
                ("import of a transaction", "/api/v1/subscriptions/import", ["signedTransaction": try signed("3000", original: "-3000")]),
                ("import of a receipt", "/api/v1/subscriptions/import", ["appReceipt": receipt]),
            ]
            for (what, path, body) in cases {
                let response = try await app.post(path, json: body, headers: auth)
                #expect(response.status == 400, "\(what): \(response.text)")
                #expect(response.code == "INVALID_REQUEST", "\(what)")
                let message = try response.json()["message"] as? String ?? ""
                #expect(message.contains("digits") && !message.contains(Self.markup), "\(what): \(message)")
            }
            #expect(try await app.count("SELECT count(*) FROM inbound_event") == 0)
            #expect(try await app.count("SELECT count(*) FROM subscription_import") == 0)
            #expect(Self.refusals.value - refusedBefore == cases.count)

            // Apple's form passes the same route.
            let accepted = try await app.post(
                "/api/v1/subscriptions/orders/\(orderNo)/apple-transaction", json: ["signedTransaction": try signed("4000")], headers: auth)
            #expect(accepted.status == 202, "\(accepted.text)")
            #expect(app.leakedSecrets().isEmpty, "the ingress log leaks \(app.leakedSecrets())")
        }
    }

    @Test func adminChainActionsTakeOnlyApplesForm() async throws {
        try await AdminTestApp.with { admin in
            for id in ["abc123", "12%2034", String(repeating: "9", count: 65)] {
                let response = try await admin.act("/admin/v1/chains/\(id)/requery", ["reason": "check"])
                #expect(response.status == 400, "\(id): \(response.text)")
                #expect(response.code == "INVALID_REQUEST", "\(id)")
            }
        }
    }

}
