import Crypto
import Foundation
import ServiceRuntime

/// Verifies StoreKit 1 app receipts (base64 PKCS#7 SignedData, DER or BER) the way the
/// `AppReceiptVerifier` of Apple's App Store Server libraries does, with the configuration and
/// roots `SignedDataVerifier` uses:
///
/// 1. one SignedData of data content with one signer, the payload an attribute set;
/// 2. an Xcode / LocalTesting receipt (receipt type attribute 0) only with APPLE_IAP_ALLOW_XCODE:
///    its signature must verify with the certificate it carries, which no root vouches for
///    (Xcode's StoreKit CA is local to the developer's machine), as in `SignedDataVerifier`;
/// 3. any other receipt: the signature verifies with the signer certificate, which carries
///    OID 1.2.840.113635.100.6.11.1 and chains through an intermediate carrying
///    1.2.840.113635.100.6.2.1 to a configured root, checked at the receipt's creation date
///    (attribute 12; now when it has none), so receipts outlive their signing certificates;
///    with online checks, at now and against each certificate's OCSP responder instead;
/// 4. the bundle id (attribute 2) is the configured one and the receipt type is an environment
///    this deployment serves (Production serves Production and Sandbox).
///
/// Receipts are rare (imports), so nothing is cached apart from OCSP answers.
///
/// Sendable: configuration and chain verifier are immutable; the revocation checker is Sendable.
public final class AppReceiptVerifier: Sendable {
    public let configuration: AppStoreVerifierConfiguration
    private let chainVerifier: X509ChainVerifier
    private let clock: any WallClock
    private let revocation: RevocationChecker?

    /// Refuses an invalid configuration (as `SignedDataVerifier.init` does). `clock` gives
    /// "now" (receipts without a creation date, online checks); `onlineCheckTimeout` bounds
    /// each OCSP request.
    public init(
        configuration: AppStoreVerifierConfiguration, clock: any WallClock = SystemClock(),
        logger: Logger = Logger(label: "appstore.receipt"), onlineCheckTimeout: Duration = .seconds(5)
    ) throws(ConfigurationError) {
        chainVerifier = try configuration.trustedChainVerifier()
        self.configuration = configuration
        self.clock = clock
        revocation =
            configuration.onlineChecks
            ? RevocationChecker(trust: chainVerifier, timeout: onlineCheckTimeout, clock: clock, logger: logger) : nil
    }

    /// The verified receipt. Its `transactionId` is nil when it holds no purchase.
    public func verify(_ appReceipt: String) async throws(AppReceiptError) -> AppReceipt {
        let signedData: PKCS7SignedData
        do throws(CryptoError) { signedData = try PKCS7SignedData(der: try Self.base64Decoded(appReceipt)) } catch {
            throw AppReceiptError(.invalid, "not a PKCS#7 app receipt: \(error.reason)")
        }
        // Read before the signature is checked only to learn the type and creation date;
        // nothing in it counts until the checks below pass.
        let receipt = try AppReceipt(payload: signedData.content)
        let environment = receipt.environment
        if let environment, environment.isLocal {
            guard configuration.allowXcode else {
                throw AppReceiptError(.xcodeNotAllowed, "a \(environment.rawValue) receipt is refused (APPLE_IAP_ALLOW_XCODE is false)")
            }
            do throws(CryptoError) { _ = try signedData.verifySignature() } catch {
                throw AppReceiptError(.untrusted, error.reason)
            }
        } else {
            try await verifyChain(signedData, creationDate: receipt.creationDate)
        }
        guard receipt.bundleId == configuration.bundleId else {
            throw AppReceiptError(.bundleMismatch, "bundle id '\(receipt.bundleId)' is not the configured one")
        }
        guard let environment, served(environment) else {
            throw AppReceiptError(
                .environmentMismatch,
                "receipt type \(receipt.receiptType.map { "'\($0)'" } ?? "missing") is not served by a \(configuration.environment.rawValue) deployment"
            )
        }
        return receipt
    }

    /// The transaction id of a verified receipt, chosen as Apple's `ReceiptUtility` does (see
    /// `AppReceipt.transactionId`); `RECEIPT_NO_TRANSACTION` when it holds none.
    public func verifyTransactionId(_ appReceipt: String) async throws(AppReceiptError) -> String {
        guard let id = try await verify(appReceipt).transactionId else {
            throw AppReceiptError(.noTransaction, "the receipt holds no in-app purchase with a transaction id")
        }
        return id
    }

    private func verifyChain(_ signedData: PKCS7SignedData, creationDate: Date?) async throws(AppReceiptError) {
        let date = configuration.onlineChecks ? clock.now() : (creationDate ?? clock.now())
        let chain: [X509Certificate]
        do throws(CryptoError) { chain = try signedData.verify(trust: chainVerifier, at: date) } catch {
            throw AppReceiptError(.untrusted, error.reason)
        }
        guard chain.count == 3, chain[0].hasExtension(oid: SignedDataVerifier.leafOID), !chain[0].isCA,
            chain[1].hasExtension(oid: SignedDataVerifier.intermediateOID)
        else {
            throw AppReceiptError(
                .untrusted,
                "the chain is not an App Store signing leaf (OID \(SignedDataVerifier.leafOID)) → Apple intermediate (OID \(SignedDataVerifier.intermediateOID)) → configured root"
            )
        }
        do throws(VerificationError) { try await revocation?.check(chain: chain) } catch {
            throw AppReceiptError(error.isRetryable ? .retryable : .untrusted, error.reason)
        }
    }

    /// Mirrors `SignedDataVerifier`: a Production deployment serves both App Store environments,
    /// any other serves Sandbox (and local data when allowed, checked before this).
    private func served(_ environment: AppStoreEnvironment) -> Bool {
        switch environment {
        case .production: configuration.environment == .production
        case .sandbox: true
        case .xcode, .localTesting: configuration.allowXcode && configuration.environment != .production
        }
    }

    /// Base64 as clients send receipts: line breaks and other white space are ignored.
    private static func base64Decoded(_ text: String) throws(CryptoError) -> [UInt8] {
        let compact = String(text.unicodeScalars.filter { !$0.properties.isWhitespace })
        guard !compact.isEmpty, let data = Data(base64Encoded: compact) else {
            throw CryptoError(.invalidInput, "not base64")
        }
        return Array(data)
    }
}
