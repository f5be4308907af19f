import AppStore
import AppStoreTestSupport
import Foundation
import TestSupport
import Testing

/// Extend Subscription Renewal Dates for All Active Subscribers, its status and Finish
/// Transaction, against the mock speaking Apple's paths and fields.
@Suite struct MassExtensionClientTests {
    @Test func aMassExtensionIsAcceptedThenReportsItsCountsWhenComplete() async throws {
        try await APIFixture.with { fixture in
            var monthly = fixture.transaction()
            monthly.productId = "com.example.monthly"
            var french = fixture.transaction()
            french.productId = "com.example.monthly"
            french.storefront = "FRA"
            var yearly = fixture.transaction()
            yearly.productId = "com.example.yearly"
            for transaction in [monthly, french, yearly] { try fixture.mock.addTransaction(transaction) }
            let client = fixture.client()
            let identifier = UUID().uuidString.lowercased()
            let accepted = try await client.extendRenewalDateForAllActiveSubscribers(
                MassExtendRenewalDateRequest(
                    extendByDays: 7, extendReasonCode: 3, requestIdentifier: identifier, storefrontCountryCodes: ["USA"],
                    productId: "com.example.monthly"))
            #expect(accepted.requestIdentifier == identifier)
            let sent = try #require(fixture.mock.requests.last)
            #expect(sent.method == "POST" && sent.path == "/inApps/v1/subscriptions/extend/mass")
            let body = try JSONSerialization.jsonObject(with: Data(sent.body)) as? [String: Any]
            #expect(body?["extendByDays"] as? Int == 7 && body?["extendReasonCode"] as? Int == 3)
            #expect(body?["requestIdentifier"] as? String == identifier && body?["productId"] as? String == "com.example.monthly")
            #expect(body?["storefrontCountryCodes"] as? [String] == ["USA"])

            var status = try await client.getStatusOfSubscriptionRenewalDateExtensions(
                productId: "com.example.monthly", requestIdentifier: identifier)
            #expect(status.complete == false && status.succeededCount == nil)
            #expect(fixture.mock.requests.last?.path == "/inApps/v1/subscriptions/extend/mass/com.example.monthly/\(identifier)")
            for _ in 0..<fixture.mock.massExtensionPolls {
                status = try await client.getStatusOfSubscriptionRenewalDateExtensions(
                    productId: "com.example.monthly", requestIdentifier: identifier)
            }
            #expect(status.complete == true && status.requestIdentifier == identifier)
            // Only the USA storefront's monthly subscriber: not the French one, not the yearly one.
            #expect(status.succeededCount == 1 && status.failedCount == 0 && status.completeDate != nil)
        }
    }

    @Test func appleRulesOnTheRequestComeBackAsItsErrorCodes() async throws {
        try await APIFixture.with { fixture in
            let client = fixture.client()
            let tooLong = await #expect(throws: AppStoreAPIError.self) {
                try await client.extendRenewalDateForAllActiveSubscribers(
                    MassExtendRenewalDateRequest(
                        extendByDays: 91, extendReasonCode: 3, requestIdentifier: UUID().uuidString, productId: "com.example.monthly"))
            }
            #expect(tooLong?.apiError == .invalidExtendByDays)
            let unknown = await #expect(throws: AppStoreAPIError.self) {
                try await client.getStatusOfSubscriptionRenewalDateExtensions(
                    productId: "com.example.monthly", requestIdentifier: UUID().uuidString.lowercased())
            }
            #expect(unknown?.apiError == .statusRequestNotFound)
        }
    }

    @Test func finishTransactionMarksTheTransactionFinished() async throws {
        try await APIFixture.with { fixture in
            let transaction = fixture.transaction()
            try fixture.mock.addTransaction(transaction)
            let client = fixture.client()
            try await client.finishTransaction(transactionId: transaction.transactionId!)
            #expect(fixture.mock.requests.last?.method == "POST")
            #expect(fixture.mock.requests.last?.path == "/inApps/v1/transactions/\(transaction.transactionId!)/finish")
            #expect(fixture.mock.finishedTransactions == [transaction.transactionId!])
            let unknown = await #expect(throws: AppStoreAPIError.self) { try await client.finishTransaction(transactionId: "1999") }
            #expect(unknown?.apiError == .transactionIdNotFound)
        }
    }

    @Test func getAppTransactionInfoAnswersTheCustomersSignedAppTransaction() async throws {
        try await APIFixture.with { fixture in
            var transaction = fixture.transaction()
            transaction.appTransactionId = "704289572311662387"
            let without = fixture.transaction()
            try fixture.mock.addTransaction(transaction)
            try fixture.mock.addTransaction(without)
            let client = fixture.client()
            let answer = try await client.getAppTransactionInfo(transactionId: transaction.transactionId!)
            #expect(fixture.mock.requests.last?.path == "/inApps/v1/transactions/appTransactions/\(transaction.transactionId!)")
            let signed = try #require(answer.signedAppTransactionInfo)
            let app = try await fixture.verifier().verifyAppTransaction(signed)
            #expect(app.appTransactionId == "704289572311662387" && app.bundleId == APIFixture.bundleId)
            let none = await #expect(throws: AppStoreAPIError.self) {
                try await client.getAppTransactionInfo(transactionId: without.transactionId!)
            }
            #expect(none?.apiError == .appTransactionDoesNotExist)
        }
    }
}
