import AppStore
import Crypto
import Domain
import Foundation
import Pipeline
import Storage

/// A claimed event, opened and verified: where it came from and the Apple facts it carries.
struct VerifiedEvent: Sendable {
    var source: FactSource
    var transaction: TransactionRecord?
    var renewal: RenewalFact?
    /// The Apple Account a notification about the app names (RESCIND_CONSENT's signed app transaction).
    var appTransactionID: String?
    /// When Apple signed the notification (a RESCIND_CONSENT older than an operator's restore is not applied).
    var signedDate: Date?
}

/// A verified transaction: the fact the rules read, plus the columns stored beside it.
struct TransactionRecord: Sendable {
    var fact: TransactionFact
    var webOrderLineItemID: String?
    var revocationType: String?
    var revocationReason: Int32?
    var offerIdentifier: String?
    /// Milliunits of `currency` (display only: App Store Connect reports are the financial truth).
    var price: Int64?
    var currency: String?
    /// Hex SHA-256 of the signed transaction.
    var payloadHash: String
    /// The token as signed, even when it is not a UUID (then it maps to no user: UNMATCHED).
    var appAccountTokenUUID: UUID?
    /// The Apple Account's id for this app, when Apple signed one (or Get App Transaction Info named it).
    var appTransactionID: String?
    /// `appTransactionID` came from Get App Transaction Info, not from the signed transaction.
    var appTransactionLookedUp = false
}

/// Opens the sealed payloads and verifies what the worker relies on.
///
/// A notification's outer JWS is not verified again: the ingress verified it before sealing it, and
/// AES-GCM under our key, bound to the notification UUID, proves the bytes are the ones it stored.
/// The nested transaction and renewal info are verified here, as is a client submission's JWS.
struct EventReader: Sendable {
    let cipher: PayloadCipher
    let verifier: SignedDataVerifier

    init(cipher: PayloadCipher, verifier: SignedDataVerifier) {
        self.cipher = cipher
        self.verifier = verifier
    }

    func read(_ event: ClaimedEvent) async throws(ProcessingFailure) -> VerifiedEvent {
        let payload = event.payload
        guard let environment = AppStoreEnvironment(rawValue: payload.environment) else {
            throw .permanent(code: "INVALID_ENVIRONMENT", message: "unknown environment \(payload.environment)")
        }
        let jws = try open(payload)
        switch payload.origin {
        case .notification(_, let type, let subtype):
            let outer = try decodeOuter(jws)
            let data = outer.data
            var verified = VerifiedEvent(source: .notification(type: type, subtype: subtype), transaction: nil, renewal: nil)
            verified.signedDate = outer.signedDate
            if let token = outer.appData?.signedAppTransactionInfo {
                verified.appTransactionID = try await appTransaction(token, environment: environment)
            }
            if let token = data?.signedTransactionInfo {
                verified.transaction = try await transaction(token, environment: environment)
            }
            if let token = data?.signedRenewalInfo { verified.renewal = try await renewal(token, environment: environment) }
            return verified
        case .submission(let kind, let userID, let orderNo, _):
            let source: FactSource
            if kind == "CLIENT", let orderNo {
                source = .clientSubmission(orderNo: orderNo, submitter: userID)
            } else {
                source = .observedSubmission(submitter: userID)
            }
            return VerifiedEvent(source: source, transaction: try await transaction(jws, environment: environment), renewal: nil)
        }
    }

    private func open(_ payload: EventPayload) throws(ProcessingFailure) -> String {
        if payload.redacted {
            // Only applied events are redacted and none is claimed again; a clear refusal if one is.
            throw .permanent(code: "PAYLOAD_REDACTED", message: "the event's payload was redacted after PAYLOAD_RETENTION_DAYS")
        }
        guard let sealed = payload.sealed, let keyID = payload.keyID else {
            throw .permanent(code: "PAYLOAD_MISSING", message: "the event has no stored payload")
        }
        do {
            return String(decoding: try cipher.open(sealed, keyID: keyID, context: payload.origin.sealingContext), as: UTF8.self)
        } catch let error as UnknownPayloadKey {
            // Permanent until an operator lists the key again; then the event can be replayed.
            throw .permanent(code: "PAYLOAD_KEY_UNKNOWN", message: "payload sealed with unlisted key \(error.keyID)")
        } catch {
            throw .permanent(code: "PAYLOAD_UNREADABLE", message: "the stored payload does not open")
        }
    }

    private func decodeOuter(_ jws: String) throws(ProcessingFailure) -> ResponseBodyV2DecodedPayload {
        guard let parts = JWSParts(jws), let bytes = Base64URL.decode(parts.payload),
            let payload = try? AppStoreJSON.decode(ResponseBodyV2DecodedPayload.self, from: bytes)
        else { throw .permanent(code: "MALFORMED", message: "the stored notification does not decode") }
        return payload
    }

    private func transaction(_ jws: String, environment: AppStoreEnvironment) async throws(ProcessingFailure)
        -> TransactionRecord
    {
        let decoded: JWSTransactionDecodedPayload
        do {
            decoded = try await verifier.verifyTransaction(jws, expectedEnvironment: environment)
        } catch {
            throw Self.failure(error)
        }
        guard let id = decoded.transactionId, let original = decoded.originalTransactionId,
            let product = decoded.productId, let purchase = decoded.purchaseDate, let signed = decoded.signedDate,
            let environment = decoded.rawEnvironment
        else { throw .permanent(code: "MALFORMED", message: "the transaction lacks its identifiers or dates") }
        try Self.checkForm(of: [id, original])
        let token = decoded.rawAppAccountToken.flatMap { $0.isEmpty ? nil : $0 }
        let uuid = token.flatMap(UUID.init(uuidString:))
        let fact = TransactionFact(
            environment: environment, transactionID: id, originalTransactionID: original, productID: product,
            purchaseDate: purchase, originalPurchaseDate: decoded.originalPurchaseDate, expiresDate: decoded.expiresDate,
            revocationDate: decoded.revocationDate, revocationPercentage: decoded.revocationPercentage.map(Int.init),
            isUpgraded: decoded.isUpgraded ?? false,
            ownershipType: decoded.rawInAppOwnershipType ?? "PURCHASED", offerType: decoded.rawOfferType.map(Int.init),
            offerDiscountType: decoded.rawOfferDiscountType, offerPeriod: decoded.offerPeriod,
            transactionReason: decoded.rawTransactionReason,
            appAccountToken: uuid.map { $0.uuidString.lowercased() } ?? token, signedDate: signed,
            commitment: Self.commitment(decoded))
        return TransactionRecord(
            fact: fact, webOrderLineItemID: decoded.webOrderLineItemId, revocationType: decoded.rawRevocationType,
            revocationReason: decoded.rawRevocationReason, offerIdentifier: decoded.offerIdentifier,
            price: decoded.price, currency: decoded.currency, payloadHash: Hex.encode(SHA256.hash(Array(jws.utf8))),
            appAccountTokenUUID: uuid, appTransactionID: decoded.appTransactionId)
    }

    /// The Apple Account id of a signed app transaction (checked like any of Apple's signatures).
    private func appTransaction(_ jws: String, environment: AppStoreEnvironment) async throws(ProcessingFailure) -> String {
        let decoded: AppTransaction
        do {
            decoded = try await verifier.verifyAppTransaction(jws, expectedEnvironment: environment)
        } catch {
            throw Self.failure(error)
        }
        guard let id = decoded.appTransactionId, !id.isEmpty else {
            throw .permanent(code: "MALFORMED", message: "the app transaction lacks its appTransactionId")
        }
        return id
    }

    private func renewal(_ jws: String, environment: AppStoreEnvironment) async throws(ProcessingFailure)
        -> RenewalFact
    {
        let decoded: JWSRenewalInfoDecodedPayload
        do {
            decoded = try await verifier.verifyRenewalInfo(jws, expectedEnvironment: environment)
        } catch {
            throw Self.failure(error)
        }
        guard let original = decoded.originalTransactionId, let product = decoded.productId ?? decoded.autoRenewProductId,
            let signed = decoded.signedDate, let environment = decoded.rawEnvironment
        else { throw .permanent(code: "MALFORMED", message: "the renewal info lacks its identifiers or dates") }
        try Self.checkForm(of: [original])
        return RenewalFact(
            environment: environment, originalTransactionID: original, productID: product,
            autoRenewProductID: decoded.autoRenewProductId, autoRenewEnabled: decoded.rawAutoRenewStatus == 1,
            isInBillingRetryPeriod: decoded.isInBillingRetryPeriod ?? false,
            gracePeriodExpiresDate: decoded.gracePeriodExpiresDate, expirationIntent: decoded.rawExpirationIntent.map(Int.init),
            priceIncreaseStatus: decoded.rawPriceIncreaseStatus.map(Int.init), renewalDate: decoded.renewalDate,
            renewalPrice: decoded.renewalPrice, renewalCurrency: decoded.currency,
            signedDate: signed, commitment: Self.commitment(decoded))
    }

    /// A transaction's billing plan; nil when Apple signed none (billed up front) or one this
    /// version does not know, which is then treated as any subscription's period.
    static func commitment(_ decoded: JWSTransactionDecodedPayload) -> TransactionCommitment? {
        guard let plan = decoded.rawBillingPlanType.flatMap(BillingPlan.init(rawValue:)) else { return nil }
        let info = decoded.commitmentInfo
        return TransactionCommitment(
            billingPlan: plan, billingPeriodNumber: info?.billingPeriodNumber.map(Int.init),
            totalBillingPeriods: info?.totalBillingPeriods.map(Int.init), expiresDate: info?.commitmentExpiresDate,
            price: info?.commitmentPrice)
    }

    /// What the renewal info says of the commitment; nil when it says nothing of it.
    static func commitment(_ decoded: JWSRenewalInfoDecodedPayload) -> RenewalCommitment? {
        let info = decoded.commitmentInfo
        guard decoded.rawRenewalBillingPlanType != nil || info != nil else { return nil }
        return RenewalCommitment(
            billingPlan: decoded.rawRenewalBillingPlanType.flatMap(BillingPlan.init(rawValue:)),
            autoRenewProductID: info?.commitmentAutoRenewProductId,
            autoRenewEnabled: info?.rawCommitmentAutoRenewStatus.map { $0 == AutoRenewStatus.on.rawValue },
            renewalBillingPlan: info?.rawCommitmentRenewalBillingPlanType.flatMap(BillingPlan.init(rawValue:)),
            renewalDate: info?.commitmentRenewalDate, renewalPrice: info?.commitmentRenewalPrice)
    }

    /// Signed ids in another form than Apple's never came from the App Store (a test or Xcode
    /// signer, a tampered chain): the event is set aside, never applied, and kept for replay. The
    /// message does not repeat the id, which may be markup.
    static func checkForm(of ids: [String]) throws(ProcessingFailure) {
        guard ids.allSatisfy(AppleTransactionID.isValid) else {
            throw .permanent(
                code: "TRANSACTION_ID_INVALID",
                message: "a transaction id is not in Apple's form (1 to \(AppleTransactionID.maxLength) digits)")
        }
    }

    /// An unavailable revocation check may pass later; anything else never will.
    static func failure(_ error: VerificationError) -> ProcessingFailure {
        error.isRetryable
            ? .retryable(code: VerificationErrorClass.retryableVerification.rawValue, message: error.description)
            : .permanent(code: error.code.rawValue, message: error.description)
    }
}
