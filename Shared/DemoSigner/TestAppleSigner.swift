import AppStore
import Crypto
import Foundation

/// Signs App Store payloads like Apple does (ES256 JWS with an x5c chain of leaf, intermediate
/// and root carrying Apple's marker OIDs), with a P-256 chain generated at run time.
///
/// Configure a service under test with `verifierEnvironment(...)` (APPLE_IAP_ROOT_CERTS pointing
/// at this root, APPLE_IAP_ALLOW_TEST_ROOTS=true). `Options` builds broken chains for negative
/// tests; `variant(_:)` keeps the same root so only the variation differs.
///
/// Sendable: every stored property is immutable and Sendable.
public final class TestAppleSigner: Sendable {
    public static let leafOID = "1.2.840.113635.100.6.11.1"
    public static let intermediateOID = "1.2.840.113635.100.6.2.1"

    /// How the generated chain deviates from Apple's (the default is Apple-like and valid now).
    public struct Options: Sendable {
        public var leafHasAppleOID = true
        public var intermediateHasAppleOID = true
        /// Default: one day ago to one year ahead.
        public var leafValidity: ClosedRange<Date>?
        /// Default: one year ago to five years ahead.
        public var intermediateValidity: ClosedRange<Date>?
        /// When set, leaf and intermediate name OCSP responders as Apple's do: the leaf
        /// `<base>/intermediate` (answered by the intermediate CA), the intermediate `<base>/root`.
        public var ocspResponderBaseURL: String?

        public init(
            leafHasAppleOID: Bool = true, intermediateHasAppleOID: Bool = true, leafValidity: ClosedRange<Date>? = nil,
            intermediateValidity: ClosedRange<Date>? = nil, ocspResponderBaseURL: String? = nil
        ) {
            self.ocspResponderBaseURL = ocspResponderBaseURL
            self.leafHasAppleOID = leafHasAppleOID
            self.intermediateHasAppleOID = intermediateHasAppleOID
            self.leafValidity = leafValidity
            self.intermediateValidity = intermediateValidity
        }
    }

    public let rootKey: P256PrivateKey
    public let intermediateKey: P256PrivateKey
    public let leafKey: P256PrivateKey
    public let root: X509Certificate
    public let intermediate: X509Certificate
    public let leaf: X509Certificate

    /// A fresh chain under a fresh root.
    public convenience init(options: Options = Options(), now: Date = Date()) throws {
        let rootKey = P256PrivateKey.generate()
        let year: TimeInterval = 365 * 86400
        let root = try TestCertificateIssuer.selfSigned(
            TestCertificateSpec(
                commonName: "Test Apple Root CA", organization: "Test Signer", notBefore: now - 2 * year,
                notAfter: now + 20 * year, isCA: true),
            key: rootKey)
        try self.init(root: root, rootKey: rootKey, options: options, now: now)
    }

    private init(root: X509Certificate, rootKey: P256PrivateKey, options: Options, now: Date) throws {
        let year: TimeInterval = 365 * 86400
        self.root = root
        self.rootKey = rootKey
        intermediateKey = P256PrivateKey.generate()
        leafKey = P256PrivateKey.generate()
        let intermediateValidity = options.intermediateValidity ?? (now - year)...(now + 5 * year)
        intermediate = try TestCertificateIssuer.issue(
            TestCertificateSpec(
                commonName: "Test Apple Worldwide Developer Relations CA", notBefore: intermediateValidity.lowerBound,
                notAfter: intermediateValidity.upperBound, isCA: true,
                extensions: options.intermediateHasAppleOID ? [TestCertificateExtension(oid: Self.intermediateOID)] : [],
                ocspResponderURL: options.ocspResponderBaseURL.map { $0 + "/root" }),
            subjectKey: intermediateKey.publicKey, issuer: root, issuerKey: rootKey)
        let leafValidity = options.leafValidity ?? (now - 86400)...(now + year)
        leaf = try TestCertificateIssuer.issue(
            TestCertificateSpec(
                commonName: "Test Mac App Store and iTunes Store Receipt Signing", notBefore: leafValidity.lowerBound,
                notAfter: leafValidity.upperBound, isCA: false,
                extensions: options.leafHasAppleOID ? [TestCertificateExtension(oid: Self.leafOID)] : [],
                ocspResponderURL: options.ocspResponderBaseURL.map { $0 + "/intermediate" }),
            subjectKey: leafKey.publicKey, issuer: intermediate, issuerKey: intermediateKey)
    }

    /// The chain as given; `TestAppleSigner(loadingFrom:)` checks that each key matches its certificate.
    init(
        rootKey: P256PrivateKey, intermediateKey: P256PrivateKey, leafKey: P256PrivateKey, root: X509Certificate,
        intermediate: X509Certificate, leaf: X509Certificate
    ) {
        self.rootKey = rootKey
        self.intermediateKey = intermediateKey
        self.leafKey = leafKey
        self.root = root
        self.intermediate = intermediate
        self.leaf = leaf
    }

    /// A new intermediate and leaf under the same root, deviating as `options` says.
    public func variant(_ options: Options, now: Date = Date()) throws -> TestAppleSigner {
        try TestAppleSigner(root: root, rootKey: rootKey, options: options, now: now)
    }

    /// The `x5c` header value: standard base64 DER of leaf, intermediate and root.
    public var x5c: [String] { [leaf, intermediate, root].map { Data($0.der).base64EncodedString() } }

    /// A compact JWS of `payload` bytes under `header` (default: ES256 with this chain),
    /// signed with the leaf key.
    public func sign(payload: [UInt8], header: TestJWSHeader? = nil) throws -> String {
        let header = header ?? TestJWSHeader(alg: "ES256", x5c: x5c)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let signingInput = Base64URL.encode(Array(try encoder.encode(header))) + "." + Base64URL.encode(payload)
        let signature = try leafKey.signature(for: Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }

    /// A compact JWS of a model (or any Encodable) in Apple's JSON form.
    public func sign(_ payload: some Encodable, header: TestJWSHeader? = nil) throws -> String {
        try sign(payload: Array(try AppStoreJSON.encoder().encode(payload)), header: header)
    }

    /// A signed notification whose `data` carries the given transaction and renewal info, each
    /// signed with this chain too.
    public func signNotification(
        type: NotificationTypeV2, subtype: Subtype? = nil, bundleId: String, appAppleId: Int64? = nil,
        environment: AppStoreEnvironment, transaction: JWSTransactionDecodedPayload? = nil,
        renewalInfo: JWSRenewalInfoDecodedPayload? = nil, signedDate: Date = Date(), notificationUUID: UUID = UUID()
    ) throws -> String {
        var data = NotificationData()
        data.bundleId = bundleId
        data.appAppleId = appAppleId
        data.environment = environment
        data.bundleVersion = "1"
        data.status = renewalInfo == nil ? nil : .active
        data.signedTransactionInfo = try transaction.map { try sign($0) }
        data.signedRenewalInfo = try renewalInfo.map { try sign($0) }
        var payload = ResponseBodyV2DecodedPayload()
        payload.notificationType = type
        payload.subtype = subtype
        payload.notificationUUID = notificationUUID.uuidString.lowercased()
        payload.version = "2.0"
        payload.signedDate = TestPayloads.wholeMilliseconds(signedDate)
        payload.data = data
        return try sign(payload)
    }

    /// Writes the root certificate as PEM to a new file under `directory` (default: the
    /// temporary directory) and returns its path, for APPLE_IAP_ROOT_CERTS.
    public func writeRootCertificate(directory: URL = FileManager.default.temporaryDirectory) throws -> String {
        let url = directory.appendingPathComponent("test-apple-root-\(UUID().uuidString).pem")
        try Data(root.pem.utf8).write(to: url)
        return url.path
    }

    /// Environment variables that make a service trust this signer (writes the root file).
    public func verifierEnvironment(
        bundleId: String, environment: AppStoreEnvironment = .sandbox, appAppleId: Int64? = nil
    ) throws -> [String: String] {
        var variables = [
            "APPLE_IAP_BUNDLE_ID": bundleId, "APPLE_IAP_ENV": environment.rawValue,
            "APPLE_IAP_ROOT_CERTS": try writeRootCertificate(), "APPLE_IAP_ALLOW_TEST_ROOTS": "true",
        ]
        if let appAppleId { variables["APPLE_IAP_APPLE_ID"] = String(appAppleId) }
        return variables
    }

    /// An in-memory verifier configuration trusting this signer's root.
    public func verifierConfiguration(
        bundleId: String, environment: AppStoreEnvironment = .sandbox, appAppleId: Int64? = nil, allowXcode: Bool = false
    ) -> AppStoreVerifierConfiguration {
        AppStoreVerifierConfiguration(
            bundleId: bundleId, appAppleId: appAppleId, environment: environment, rootCertificates: [root],
            allowTestRoots: true, allowXcode: allowXcode)
    }
}

/// A JWS protected header as the test signer writes it; every field optional so negative tests
/// can drop or change any of them.
public struct TestJWSHeader: Encodable, Sendable {
    public var alg: String?
    public var x5c: [String]?
    public var kid: String?
    public var typ: String?
    public var crit: [String]?

    public init(alg: String? = "ES256", x5c: [String]? = nil, kid: String? = nil, typ: String? = nil, crit: [String]? = nil) {
        self.alg = alg
        self.x5c = x5c
        self.kid = kid
        self.typ = typ
        self.crit = crit
    }
}

/// Plausible payloads for tests, filled like Apple fills them. Dates are cut to whole
/// milliseconds, as in Apple's JSON, so a payload compares equal after a signing round trip.
public enum TestPayloads {
    public static func wholeMilliseconds(_ date: Date) -> Date {
        Date(timeIntervalSince1970: (date.timeIntervalSince1970 * 1000).rounded(.down) / 1000)
    }

    public static func transaction(
        bundleId: String, environment: AppStoreEnvironment, productId: String = "com.example.monthly",
        transactionId: String = String(UInt64.random(in: 2_000_000_000_000_000...2_999_999_999_999_999)),
        originalTransactionId: String? = nil, purchaseDate: Date = Date(), expiresDate: Date? = nil,
        appAccountToken: UUID? = nil, signedDate: Date = Date()
    ) -> JWSTransactionDecodedPayload {
        var transaction = JWSTransactionDecodedPayload()
        transaction.transactionId = transactionId
        transaction.originalTransactionId = originalTransactionId ?? transactionId
        transaction.webOrderLineItemId = transactionId
        transaction.bundleId = bundleId
        transaction.productId = productId
        transaction.subscriptionGroupIdentifier = "21000000"
        let purchaseDate = wholeMilliseconds(purchaseDate)
        transaction.purchaseDate = purchaseDate
        transaction.originalPurchaseDate = purchaseDate
        transaction.expiresDate = wholeMilliseconds(expiresDate ?? purchaseDate + 30 * 86400)
        transaction.quantity = 1
        transaction.type = .autoRenewableSubscription
        transaction.appAccountToken = appAccountToken
        transaction.inAppOwnershipType = .purchased
        transaction.signedDate = wholeMilliseconds(signedDate)
        transaction.environment = environment
        transaction.transactionReason = .purchase
        transaction.storefront = "USA"
        transaction.storefrontId = "143441"
        transaction.currency = "USD"
        transaction.price = 9990
        return transaction
    }

    public static func renewalInfo(
        environment: AppStoreEnvironment, productId: String = "com.example.monthly", originalTransactionId: String,
        autoRenew: Bool = true, renewalDate: Date = Date() + 30 * 86400, signedDate: Date = Date()
    ) -> JWSRenewalInfoDecodedPayload {
        var renewal = JWSRenewalInfoDecodedPayload()
        renewal.originalTransactionId = originalTransactionId
        renewal.autoRenewProductId = productId
        renewal.productId = productId
        renewal.autoRenewStatus = autoRenew ? .on : .off
        renewal.signedDate = wholeMilliseconds(signedDate)
        renewal.environment = environment
        renewal.recentSubscriptionStartDate = wholeMilliseconds(signedDate)
        renewal.renewalDate = wholeMilliseconds(renewalDate)
        renewal.currency = "USD"
        renewal.renewalPrice = 9990
        return renewal
    }
}
