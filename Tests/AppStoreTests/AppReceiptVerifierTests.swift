import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import ServiceRuntime
import TestSupport
import Testing

/// StoreKit 1 app receipts: Apple's Xcode sample (read in place) and receipts signed at test
/// time by the test signer's Apple-like chain.
@Suite struct AppReceiptVerifierTests {
    static let bundleId = "com.example.app"
    static let xcodeBundleId = "com.example.naturelab.backyardbirds.example"
    static let day: TimeInterval = 86400

    let signer: TestAppleSigner

    init() throws { signer = try TestAppleSigner() }

    func verifier(
        trusting signer: TestAppleSigner? = nil, bundleId: String = bundleId, environment: AppStoreEnvironment = .sandbox,
        allowXcode: Bool = false, onlineChecks: Bool = false, clock: any WallClock = SystemClock()
    ) throws -> AppReceiptVerifier {
        var configuration = (signer ?? self.signer).verifierConfiguration(
            bundleId: bundleId, environment: environment, appAppleId: environment == .production ? 1 : nil, allowXcode: allowXcode)
        configuration.onlineChecks = onlineChecks
        return try AppReceiptVerifier(configuration: configuration, clock: clock, logger: Logger(label: "test", level: .critical))
    }

    /// The code `receipt` is refused with, nil when it verifies (and, with `transactionId`, yields one).
    static func code(_ verifier: AppReceiptVerifier, _ receipt: String, transactionId: Bool = false) async -> AppReceiptError.Code? {
        do throws(AppReceiptError) {
            if transactionId { _ = try await verifier.verifyTransactionId(receipt) } else { _ = try await verifier.verify(receipt) }
            return nil
        } catch { return error.code }
    }

    static let purchases = [
        TestAppReceipt.InAppPurchase(productId: "pro.monthly", transactionId: "2000000000000002", originalTransactionId: "2000000000000001"),
        TestAppReceipt.InAppPurchase(productId: "credits.pack", transactionId: "2000000000000003", originalTransactionId: "2000000000000003"),
    ]

    // MARK: Apple's Xcode sample

    @Test(.enabled(if: AppleVectors.isPresent, AppleVectors.skipComment))
    func xcodeSampleIsRefusedUnlessXcodeDataIsAllowed() async throws {
        let receipt = try AppleVectors.text("receipts/xcode-app-receipt-empty")
        // Trusting a genuine Apple root changes nothing: the sample is signed by Xcode's own CA.
        var configuration = signer.verifierConfiguration(bundleId: Self.xcodeBundleId)
        configuration.rootCertificates.append(try AppleVectors.root("AppleIncRootCertificate.cer"))
        let strict = try AppReceiptVerifier(configuration: configuration)
        #expect(await Self.code(strict, receipt) == .xcodeNotAllowed)
        #expect(await Self.code(strict, receipt, transactionId: true) == .xcodeNotAllowed)
    }

    @Test(.enabled(if: AppleVectors.isPresent, AppleVectors.skipComment))
    func xcodeSampleParsesAndHoldsNoTransactionWhenAllowed() async throws {
        let receipt = try AppleVectors.text("receipts/xcode-app-receipt-empty")
        let verifier = try verifier(bundleId: Self.xcodeBundleId, environment: .xcode, allowXcode: true)
        let decoded = try await verifier.verify(receipt)
        #expect(decoded.bundleId == Self.xcodeBundleId)
        #expect(decoded.receiptType == "Xcode" && decoded.environment == .xcode)
        #expect(decoded.applicationVersion == "1")
        #expect(decoded.creationDate == RFC3339.date(from: "2023-10-19T01:18:54Z"))
        #expect(decoded.inAppPurchases.isEmpty && decoded.transactionId == nil)
        #expect(await Self.code(verifier, receipt, transactionId: true) == .noTransaction)
        // Allowed, but still for one app only.
        let otherApp = try self.verifier(bundleId: Self.bundleId, environment: .xcode, allowXcode: true)
        #expect(await Self.code(otherApp, receipt) == .bundleMismatch)
    }

    @Test(.enabled(if: AppleVectors.isPresent, AppleVectors.skipComment))
    func xcodeSampleWithATamperedPayloadIsUntrusted() async throws {
        var bytes = try #require(Data(base64Encoded: try AppleVectors.text("receipts/xcode-app-receipt-empty")).map(Array.init))
        // The application version "1" (attribute 3) becomes "2": still a well-formed payload.
        let version: [UInt8] = [0x02, 0x01, 0x03, 0x02, 0x01, 0x01, 0x04, 0x03, 0x0c, 0x01, 0x31]
        let at = try #require(bytes.indices.first { bytes[$0...].starts(with: version) })
        bytes[at + version.count - 1] = 0x32
        let verifier = try verifier(bundleId: Self.xcodeBundleId, environment: .xcode, allowXcode: true)
        let tampered = Data(bytes).base64EncodedString()
        #expect(await Self.code(verifier, tampered) == .untrusted)
    }

    // MARK: Test-signed receipts

    @Test(arguments: TestPKCS7.Encoding.allCases)
    func receiptsWithTransactionsVerifyAndYieldTheFirstTransactionId(encoding: TestPKCS7.Encoding) async throws {
        // Whole seconds, as the receipt writes them; inside the leaf's validity (from a day ago).
        let created = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 - 3600).rounded(.down))
        let receipt = try signer.signReceipt(
            TestAppReceipt(bundleId: Self.bundleId, creationDate: created, inAppPurchases: Self.purchases), encoding: encoding)
        if encoding == .berIndefinite {
            // OpenSSL's streaming output: the outer SEQUENCE has an indefinite length.
            #expect(Data(base64Encoded: receipt).map { Array($0.prefix(2)) } == [0x30, 0x80])
        }
        let verifier = try verifier()
        let decoded = try await verifier.verify(receipt)
        #expect(decoded.bundleId == Self.bundleId && decoded.environment == .sandbox)
        #expect(decoded.creationDate == created)
        #expect(
            decoded.inAppPurchases
                == Self.purchases.map {
                    InAppPurchaseReceipt(productId: $0.productId, transactionId: $0.transactionId, originalTransactionId: $0.originalTransactionId)
                })
        #expect(try await verifier.verifyTransactionId(receipt) == "2000000000000002")
        // Clients send receipts with line breaks too.
        let wrapped = stride(from: 0, to: receipt.count, by: 76).map {
            String(receipt.dropFirst($0).prefix(76))
        }.joined(separator: "\r\n")
        #expect(try await verifier.verifyTransactionId(wrapped) == "2000000000000002")
    }

    @Test func theOriginalTransactionIdServesWhenAPurchaseHasNoTransactionId() async throws {
        let purchases = [
            TestAppReceipt.InAppPurchase(productId: "a", transactionId: nil, originalTransactionId: nil),
            TestAppReceipt.InAppPurchase(productId: "b", transactionId: nil, originalTransactionId: "3000000000000001"),
            TestAppReceipt.InAppPurchase(productId: "c", transactionId: "3000000000000009", originalTransactionId: "3000000000000008"),
        ]
        let receipt = try signer.signReceipt(TestAppReceipt(bundleId: Self.bundleId, inAppPurchases: purchases))
        #expect(try await verifier().verifyTransactionId(receipt) == "3000000000000001")
    }

    @Test func aReceiptWithoutPurchasesHoldsNoTransaction() async throws {
        let receipt = try signer.signReceipt(TestAppReceipt(bundleId: Self.bundleId))
        let verifier = try verifier()
        #expect(try await verifier.verify(receipt).transactionId == nil)
        #expect(await Self.code(verifier, receipt, transactionId: true) == .noTransaction)
    }

    @Test func aReceiptSignedByAnotherCAIsUntrusted() async throws {
        let other = try TestAppleSigner()
        let receipt = try other.signReceipt(TestAppReceipt(bundleId: Self.bundleId, inAppPurchases: Self.purchases))
        #expect(try await Self.code(verifier(), receipt) == .untrusted)
        // The same receipt verifies where its root is configured: only the trust differs.
        #expect(try await verifier(trusting: other).verifyTransactionId(receipt) == "2000000000000002")
    }

    @Test func aChainWithoutApplesMarkersIsUntrusted() async throws {
        for options in [TestAppleSigner.Options(leafHasAppleOID: false), .init(intermediateHasAppleOID: false)] {
            let receipt = try signer.variant(options).signReceipt(TestAppReceipt(bundleId: Self.bundleId))
            #expect(try await Self.code(verifier(), receipt) == .untrusted)
        }
    }

    @Test func aReceiptOfAnotherAppIsABundleMismatch() async throws {
        let receipt = try signer.signReceipt(TestAppReceipt(bundleId: "com.example.other", inAppPurchases: Self.purchases))
        #expect(try await Self.code(verifier(), receipt) == .bundleMismatch)
    }

    @Test func receiptTypesMustBeServedByTheDeployment() async throws {
        let production = try signer.signReceipt(TestAppReceipt(bundleId: Self.bundleId, receiptType: "Production"))
        let sandbox = try signer.signReceipt(TestAppReceipt(bundleId: Self.bundleId, receiptType: "ProductionSandbox"))
        let unknown = try signer.signReceipt(TestAppReceipt(bundleId: Self.bundleId, receiptType: "Simulator"))
        let onSandbox = try verifier(environment: .sandbox)
        let onProduction = try verifier(environment: .production)
        #expect(await Self.code(onSandbox, production) == .environmentMismatch)
        #expect(await Self.code(onSandbox, unknown) == .environmentMismatch)
        #expect(try await onSandbox.verify(sandbox).environment == .sandbox)
        #expect(try await onProduction.verify(production).environment == .production)
        #expect(try await onProduction.verify(sandbox).environment == .sandbox)
    }

    @Test func anXcodeTypedReceiptIsNeverCheckedAgainstTheRootsButNeedsTheSetting() async throws {
        // Signed by a chain nobody configured, as Xcode's StoreKit CA is.
        let local = try TestAppleSigner()
        let receipt = try local.signReceipt(
            TestAppReceipt(bundleId: Self.bundleId, receiptType: "Xcode", inAppPurchases: Self.purchases), encoding: .berIndefinite)
        #expect(try await Self.code(verifier(), receipt) == .xcodeNotAllowed)
        #expect(try await verifier(environment: .xcode, allowXcode: true).verifyTransactionId(receipt) == "2000000000000002")
    }

    @Test func malformedReceiptsAreInvalid() async throws {
        let receipt = try signer.signReceipt(TestAppReceipt(bundleId: Self.bundleId, inAppPurchases: Self.purchases))
        let der = try #require(Data(base64Encoded: receipt))
        let verifier = try verifier()
        let cases: [String: String] = [
            "truncated": der.prefix(der.count - 40).base64EncodedString(),
            "trailing bytes": (der + [0]).base64EncodedString(),
            "garbage base64": "not base64 at all!",
            "empty": "",
            "base64 of garbage": Data("definitely not a receipt".utf8).base64EncodedString(),
            "a certificate, not PKCS#7": Data(signer.leaf.der).base64EncodedString(),
        ]
        for (name, input) in cases {
            let code = await Self.code(verifier, input)
            #expect(code == .invalid, "\(name)")
        }
    }

    @Test func aSignedPayloadThatIsNotAReceiptIsInvalid() async throws {
        func bundleId(_ letter: UInt8) -> [UInt8] { [0x30, 0x0b, 0x02, 0x01, 0x02, 0x02, 0x01, 0x01, 0x04, 0x03, 0x0c, 0x01, letter] }
        let payloads: [String: [UInt8]] = [
            "empty": [],
            "a SEQUENCE": [0x30, 0x00],
            "a SET of an INTEGER": [0x31, 0x03, 0x02, 0x01, 0x05],
            "no bundle id": [0x31, 0x00],
            "no bundle id, wrapped as Xcode does": [0x04, 0x02, 0x31, 0x00],
            "two bundle ids": [0x31, 0x1a] + bundleId(0x61) + bundleId(0x62),
            "a bundle id that is not a string": [0x31, 0x0b, 0x30, 0x09, 0x02, 0x01, 0x02, 0x02, 0x01, 0x01, 0x04, 0x01, 0x05],
        ]
        // Sanity check of the helper: one bundle id alone is a receipt.
        let single = try TestPKCS7.sign(
            [0x31, 0x0d] + bundleId(0x61), certificate: signer.leaf, key: signer.leafKey, chain: [signer.intermediate], encoding: .der)
        #expect(try await Self.code(verifier(bundleId: "a"), Data(single).base64EncodedString()) == .environmentMismatch)
        for (name, payload) in payloads {
            let signed = try TestPKCS7.sign(payload, certificate: signer.leaf, key: signer.leafKey, chain: [signer.intermediate], encoding: .der)
            #expect(try await Self.code(verifier(), Data(signed).base64EncodedString()) == .invalid, "\(name)")
        }
    }

    // MARK: The verification date

    @Test func theChainIsCheckedAtTheReceiptsCreationDate() async throws {
        let now = Date()
        // A leaf that expired a month ago, valid when the receipt was made two months ago.
        let expired = try signer.variant(.init(leafValidity: (now - 400 * Self.day)...(now - 30 * Self.day)))
        let old = try expired.signReceipt(
            TestAppReceipt(bundleId: Self.bundleId, creationDate: now - 60 * Self.day, inAppPurchases: Self.purchases))
        #expect(try await verifier().verifyTransactionId(old) == "2000000000000002")
        // Made after the leaf expired, or without a creation date (checked now): refused.
        let late = try expired.signReceipt(TestAppReceipt(bundleId: Self.bundleId, creationDate: now - 10 * Self.day))
        let undated = try expired.signReceipt(TestAppReceipt(bundleId: Self.bundleId, creationDate: nil))
        #expect(try await Self.code(verifier(), late) == .untrusted)
        #expect(try await Self.code(verifier(), undated) == .untrusted)
        // Online checks evaluate at now, as the JWS path does: the expired leaf fails before any OCSP.
        #expect(try await Self.code(verifier(onlineChecks: true), old) == .untrusted)
    }

    // MARK: Online checks

    @Test func onlineChecksAskTheResponders() async throws {
        let clock = ManualClock(Date())
        let ocsp = TestOCSPServer(clock: clock, validity: 600)
        try await withResource({ try ocsp.start() }, cleanUp: { _ in await ocsp.shutdown() }) { base in
            let online = try signer.variant(.init(ocspResponderBaseURL: base))
            ocsp.serve(online)
            let receipt = try online.signReceipt(TestAppReceipt(bundleId: Self.bundleId, inAppPurchases: Self.purchases))
            let verifier = try verifier(onlineChecks: true, clock: clock)
            #expect(try await verifier.verifyTransactionId(receipt) == "2000000000000002")
            #expect(ocsp.requests(.intermediate) == 1 && ocsp.requests(.root) == 1)
            ocsp.set(.status(.revoked), for: .intermediate)
            clock.advance(by: 601)
            #expect(await Self.code(verifier, receipt) == .untrusted)
            ocsp.set(.httpError(500), for: .intermediate)
            #expect(await Self.code(verifier, receipt) == .retryable)
        }
    }
}
