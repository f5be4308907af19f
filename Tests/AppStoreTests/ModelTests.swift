import AppStore
import AppStoreTestSupport
import Foundation
import Testing

@Suite struct ModelTests {
    func decode<T: Decodable>(_ type: T.Type, _ json: String) throws -> T {
        try AppStoreJSON.decoder().decode(type, from: Data(json.utf8))
    }

    @Test func unknownEnumValuesAndFieldsDecodeAndKeepTheirRawValue() async throws {
        let json = """
            {"notificationType":"SOMETHING_NEW","subtype":"NEW_SUBTYPE","notificationUUID":"u","version":"2.0",
             "signedDate":1700000000123,"futureField":{"nested":[1,2,3]},
             "data":{"environment":"LocalTestingxxx","status":42,"consumptionRequestReason":"NEW_REASON","bundleId":"b",
                     "appAppleId":7,"anotherNewField":true}}
            """
        let payload = try decode(ResponseBodyV2DecodedPayload.self, json)
        #expect(payload.notificationType == nil && payload.rawNotificationType == "SOMETHING_NEW")
        #expect(payload.subtype == nil && payload.rawSubtype == "NEW_SUBTYPE")
        #expect(payload.data?.environment == nil && payload.data?.rawEnvironment == "LocalTestingxxx")
        #expect(payload.data?.status == nil && payload.data?.rawStatus == 42)
        #expect(payload.data?.consumptionRequestReason == nil && payload.data?.rawConsumptionRequestReason == "NEW_REASON")
        #expect(payload.data?.appAppleId == 7)
        // Re-encoding keeps the raw values Apple sent.
        let again = try decode(ResponseBodyV2DecodedPayload.self, String(decoding: try AppStoreJSON.encoder().encode(payload), as: UTF8.self))
        #expect(again == payload)
    }

    @Test func transactionFieldsDecodeWithTypedViews() async throws {
        let json = """
            {"transactionId":"2000000000000001","originalTransactionId":"2000000000000000","bundleId":"b","productId":"p",
             "purchaseDate":1700000000000,"expiresDate":1702592000000,"quantity":1,"type":"Auto-Renewable Subscription",
             "appAccountToken":"E4B2C0AB-07A9-4E12-91C9-A76D7D51B72E","inAppOwnershipType":"FAMILY_SHARED",
             "signedDate":1700000000999,"revocationReason":1,"revocationType":"REFUND_PRORATED","revocationPercentage":50000,
             "offerType":4,"offerDiscountType":"FREE_TRIAL","environment":"Production","transactionReason":"RENEWAL",
             "currency":"EUR","price":9990,"isUpgraded":false,"unknownNumber":1.5}
            """
        let t = try decode(JWSTransactionDecodedPayload.self, json)
        #expect(t.type == .autoRenewableSubscription && t.inAppOwnershipType == .familyShared)
        #expect(t.appAccountToken == UUID(uuidString: "e4b2c0ab-07a9-4e12-91c9-a76d7d51b72e"))
        #expect(t.revocationReason == .refundedDueToIssue && t.revocationType == .refundProrated)
        #expect(t.offerType == .winBackOffer && t.offerDiscountType == .freeTrial)
        #expect(t.environment == .production && t.transactionReason == .renewal)
        #expect(t.price == 9990 && t.quantity == 1 && t.isUpgraded == false)
        #expect(t.signedDate == Date(timeIntervalSince1970: 1_700_000_000.999))
        #expect(t.purchaseDate == Date(timeIntervalSince1970: 1_700_000_000))
    }

    @Test func aMalformedAppAccountTokenDoesNotBreakDecoding() async throws {
        let t = try decode(JWSTransactionDecodedPayload.self, #"{"appAccountToken":"not-a-uuid","offerType":99}"#)
        #expect(t.appAccountToken == nil && t.rawAppAccountToken == "not-a-uuid")
        #expect(t.offerType == nil && t.rawOfferType == 99)
    }

    @Test func renewalInfoAndAppTransactionDecode() async throws {
        let r = try decode(
            JWSRenewalInfoDecodedPayload.self,
            """
            {"expirationIntent":3,"autoRenewStatus":0,"priceIncreaseStatus":1,"isInBillingRetryPeriod":true,
             "gracePeriodExpiresDate":1700000000000,"renewalPrice":4990,"eligibleWinBackOfferIds":["a","b"],"environment":"Sandbox"}
            """)
        #expect(r.expirationIntent == .customerDidNotConsentToPriceIncrease && r.autoRenewStatus == .off)
        #expect(r.priceIncreaseStatus == .customerConsentedOrWasNotifiedWithoutNeedingConsent)
        #expect(r.isInBillingRetryPeriod == true && r.renewalPrice == 4990 && r.eligibleWinBackOfferIds == ["a", "b"])
        let a = try decode(
            AppTransaction.self,
            """
            {"receiptType":"Sandbox","appAppleId":1,"bundleId":"b","receiptCreationDate":1700000000000,
             "originalPlatform":"visionOS","deviceVerificationNonce":"48c8b92d-ce0d-4229-bedf-e61b4f9cfc92","newThing":null}
            """)
        #expect(a.receiptType == .sandbox && a.originalPlatform == .visionOS && a.deviceVerificationNonce != nil)
    }

    @Test func summaryAndExternalPurchaseTokenCarryTheirEnvironment() async throws {
        let summary = try decode(
            ResponseBodyV2DecodedPayload.self,
            """
            {"notificationType":"RENEWAL_EXTENSION","subtype":"SUMMARY","summary":{"environment":"Production","appAppleId":1,
             "bundleId":"b","productId":"p","requestIdentifier":"r","storefrontCountryCodes":["USA"],"succeededCount":5,"failedCount":0}}
            """)
        #expect(summary.summary?.environment == .production && summary.summary?.succeededCount == 5)
        let token = try decode(
            ResponseBodyV2DecodedPayload.self,
            """
            {"notificationType":"EXTERNAL_PURCHASE_TOKEN","subtype":"UNREPORTED","externalPurchaseToken":
             {"externalPurchaseId":"SANDBOX_abc","tokenCreationDate":1700000000000,"appAppleId":1,"bundleId":"b"}}
            """)
        #expect(token.externalPurchaseToken?.environment == .sandbox)
    }

    @Test func datesEncodeAsWholeMilliseconds() async throws {
        var t = JWSTransactionDecodedPayload()
        t.signedDate = Date(timeIntervalSince1970: 1_700_000_000.123)
        let json = String(decoding: try AppStoreJSON.encoder().encode(t), as: UTF8.self)
        #expect(json == #"{"signedDate":1700000000123}"#)
    }

    @Test func absurdDatesDecodeAndEncodeWithoutTrapping() async throws {
        let t = try decode(JWSTransactionDecodedPayload.self, #"{"signedDate":1e300,"expiresDate":-1e300}"#)
        let json = String(decoding: try AppStoreJSON.encoder().encode(t), as: UTF8.self)
        #expect(json.contains("signedDate") && json.contains("expiresDate"))
    }

    @Test func everyEnumRoundTripsItsRawValue() async throws {
        func check<E: RawRepresentable & CaseIterable & Codable & Equatable>(_: E.Type) throws where E.RawValue: Codable {
            for value in E.allCases {
                let encoded = try JSONEncoder().encode(value)
                #expect(try JSONDecoder().decode(E.self, from: encoded) == value)
                #expect(E(rawValue: value.rawValue) == value)
            }
        }
        try check(AppStoreEnvironment.self)
        try check(NotificationTypeV2.self)
        try check(Subtype.self)
        try check(Status.self)
        try check(ConsumptionRequestReason.self)
        try check(TransactionReason.self)
        try check(OfferType.self)
        try check(OfferDiscountType.self)
        try check(InAppOwnershipType.self)
        try check(RevocationReason.self)
        try check(RevocationType.self)
        try check(ProductType.self)
        try check(ExpirationIntent.self)
        try check(AutoRenewStatus.self)
        try check(PriceIncreaseStatus.self)
        try check(PurchasePlatform.self)
    }

    @Test func signedDataWithUnknownValuesVerifies() async throws {
        let signer = try TestAppleSigner()
        let verifier = try makeVerifier(trusting: signer)
        let json = """
            {"notificationType":"BRAND_NEW_TYPE","subtype":"BRAND_NEW_SUBTYPE","notificationUUID":"u","version":"3.0",
             "signedDate":\(Int64(Date().timeIntervalSince1970 * 1000)),"somethingElse":[{"a":1}],
             "data":{"environment":"Sandbox","bundleId":"com.example.app","status":9,"newField":"x"}}
            """
        let payload = try await verifier.verifyNotification(try signer.sign(payload: Array(json.utf8)))
        #expect(payload.notificationType == nil && payload.rawNotificationType == "BRAND_NEW_TYPE")
        #expect(payload.data?.status == nil && payload.data?.rawStatus == 9)
    }

    /// Monthly plans with a 12-month commitment, with the field names and values of Apple's
    /// App Store Server API (`billingPlanType`, `commitmentInfo`, `renewalBillingPlanType`).
    @Test func commitmentFieldsDecodeWithTypedViews() throws {
        let transaction = try decode(
            JWSTransactionDecodedPayload.self,
            """
            {"transactionId":"2000000000000002","originalTransactionId":"2000000000000001","productId":"p",
             "purchaseDate":1767225600000,"expiresDate":1769904000000,"signedDate":1767225600000,
             "billingPlanType":"MONTHLY",
             "commitmentInfo":{"billingPeriodNumber":2,"commitmentExpiresDate":1798761600000,"commitmentPrice":119880,
                               "totalBillingPeriods":12}}
            """)
        #expect(transaction.billingPlanType == .monthly)
        #expect(transaction.commitmentInfo?.billingPeriodNumber == 2 && transaction.commitmentInfo?.totalBillingPeriods == 12)
        #expect(transaction.commitmentInfo?.commitmentExpiresDate == Date(timeIntervalSince1970: 1_798_761_600))
        #expect(transaction.commitmentInfo?.commitmentPrice == 119_880)
        let renewal = try decode(
            JWSRenewalInfoDecodedPayload.self,
            """
            {"originalTransactionId":"2000000000000001","productId":"p","autoRenewStatus":1,"signedDate":1767225600000,
             "renewalBillingPlanType":"BILLED_UPFRONT",
             "commitmentInfo":{"commitmentAutoRenewProductId":"p.next","commitmentAutoRenewStatus":0,
                               "commitmentRenewalBillingPlanType":"NEW_PLAN","commitmentRenewalDate":1798761600000,
                               "commitmentRenewalPrice":9990}}
            """)
        #expect(renewal.renewalBillingPlanType == .billedUpfront)
        #expect(renewal.commitmentInfo?.commitmentAutoRenewProductId == "p.next")
        #expect(renewal.commitmentInfo?.commitmentAutoRenewStatus == .off)
        // A billing plan type Apple adds later is kept raw, never a decoding failure.
        #expect(renewal.commitmentInfo?.commitmentRenewalBillingPlanType == nil)
        #expect(renewal.commitmentInfo?.rawCommitmentRenewalBillingPlanType == "NEW_PLAN")
        #expect(renewal.commitmentInfo?.commitmentRenewalPrice == 9990)
        let again = try decode(
            JWSRenewalInfoDecodedPayload.self, String(decoding: try AppStoreJSON.encoder().encode(renewal), as: UTF8.self))
        #expect(again == renewal)
    }
}
