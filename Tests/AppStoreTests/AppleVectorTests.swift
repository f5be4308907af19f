import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import ServiceRuntime
import Testing

/// Every genuine Apple sample verifies against Apple Root CA - G3 at its signedDate and decodes
/// to the manifest's values; nothing else is accepted.
@Suite(.enabled(if: AppleVectors.isPresent, AppleVectors.skipComment))
struct AppleVectorTests {
    static let genuine = AppleVectors.entries(folders: ["notifications", "nested", "standalone"], expect: "accept")
    let g3: X509Certificate

    init() throws { g3 = try AppleVectors.root("AppleRootCA-G3.cer") }

    @Test func theManifestListsEverySample() async {
        #expect(Self.genuine.count == 73)
        #expect(AppleVectors.entries(folders: ["xcode"]).count == 3)
        #expect(AppleVectors.entries(folders: ["derived"]).count == 10)
        #expect(AppleVectors.entries(folders: ["edge"]).count == 1)
    }

    @Test(arguments: genuine)
    func genuineSampleVerifiesAndDecodesToTheManifest(_ entry: AppleVectors.Entry) async throws {
        let verifier = try Self.verifier(for: entry, roots: [g3])
        #expect(try await Self.verify(entry, with: verifier) == Facts(entry))
    }

    @Test(arguments: genuine)
    func genuineSampleIsRefusedUnderAnotherRoot(_ entry: AppleVectors.Entry) async throws {
        let others: [(X509Certificate, Bool)] = [
            (try AppleVectors.root("AppleRootCA-G2.cer"), false),
            (try AppleVectors.root("AppleIncRootCertificate.cer"), false),
            (try TestAppleSigner().root, true),
        ]
        for (root, isTestRoot) in others {
            let verifier = try Self.verifier(for: entry, roots: [root], allowTestRoots: isTestRoot)
            let error = await #expect(throws: VerificationError.self, "trusting \(root.subject)") {
                try await Self.verify(entry, with: verifier)
            }
            #expect(error?.code == .invalidChain, "trusting \(root.subject): \(String(describing: error))")
        }
    }

    @Test func requestBodiesCarryTheSameJWS() async throws {
        let withBodies = AppleVectors.entries.filter { $0.request_body_file != nil }
        #expect(withBodies.count == 27)
        for entry in withBodies {
            let body = try AppStoreJSON.decoder().decode(
                ResponseBodyV2.self, from: Data(try AppleVectors.text(entry.request_body_file!).utf8))
            #expect(body.signedPayload == (try AppleVectors.text(entry.file)), "\(entry.file)")
        }
    }

    @Test func nestedSamplesAreTheStringsInsideTheirNotifications() async throws {
        let nested = AppleVectors.entries(folders: ["nested"])
        #expect(nested.count == 43)
        for entry in nested {
            let parent = try #require(entry.parent.flatMap(AppleVectors.entry))
            let notification = try await Self.verifier(for: parent, roots: [g3], clock: Self.clock(at: parent))
                .verifyNotification(try AppleVectors.text(parent.file))
            let field =
                entry.file.hasSuffix(".signedTransactionInfo.jws")
                ? notification.data?.signedTransactionInfo : notification.data?.signedRenewalInfo
            #expect(field == (try AppleVectors.text(entry.file)), "\(entry.file)")
        }
    }

    @Test func repeatVerificationsReuseTheVerifiedChain() async throws {
        let entry = try #require(AppleVectors.entry("notifications/notif-DID_RENEW-none-Sandbox-2.jws"))
        let registry = MetricsRegistry()
        let verifier = try Self.verifier(for: entry, roots: [g3], metrics: registry)
        let token = try AppleVectors.text(entry.file)
        for _ in 0..<3 { _ = try await verifier.verifyNotification(token) }
        // Its nested infos come from the same leaf and intermediate: no new chain work either.
        let notification = try await verifier.verifyNotification(token)
        _ = try await verifier.verifyTransaction(try #require(notification.data?.signedTransactionInfo))
        _ = try await verifier.verifyRenewalInfo(try #require(notification.data?.signedRenewalInfo))
        #expect(registry.counter("appstore_chain_cache_misses_total", help: "").value == 1)
        #expect(registry.counter("appstore_jws_verifications_total", help: "", labels: ["result": "OK"]).value == 6)
    }

    @Test(arguments: AppleVectors.entries(folders: ["xcode"]))
    func xcodeSamplesAreRefusedUnlessAllowed(_ entry: AppleVectors.Entry) async throws {
        let refusing = try Self.verifier(for: entry, roots: [g3], environment: .sandbox)
        let error = await #expect(throws: VerificationError.self) { try await Self.verify(entry, with: refusing) }
        #expect(error?.code == .invalidEnvironment)

        // Local StoreKit testing: allowed explicitly, and only when the caller expects Xcode data.
        let allowing = try Self.verifier(for: entry, roots: [g3], environment: .sandbox, allowXcode: true)
        #expect(try await Self.verify(entry, with: allowing, expecting: .xcode) == Facts(entry))
        let wrongExpectation = await #expect(throws: VerificationError.self) { try await Self.verify(entry, with: allowing) }
        #expect(wrongExpectation?.code == .invalidEnvironment)
    }

    /// The derived negatives of the vector set, each with the code this verifier must give.
    static let derivedCodes: [String: VerificationError.Code] = [
        "derived/header-alg-none.jws": .invalidSignature,
        "derived/header-x5c-intermediate-removed.jws": .invalidChain,
        "derived/header-x5c-other-apple-leaf.jws": .invalidSignature,
        "derived/malformed-signature-63-bytes.jws": .invalidSignature,
        "derived/nested-transaction-swapped.jws": .invalidSignature,
        "derived/signature-der-encoded.jws": .invalidSignature,
        "derived/signature-from-other-notification.jws": .invalidSignature,
        "derived/tampered-payload-bundleId.jws": .invalidSignature,
        "derived/tampered-payload-one-byte.jws": .invalidSignature,
        "derived/tampered-signature-bitflip.jws": .invalidSignature,
    ]

    @Test(arguments: AppleVectors.entries(folders: ["derived"]))
    func derivedNegativesAreRefusedWithTheirCode(_ entry: AppleVectors.Entry) async throws {
        let base = try #require(AppleVectors.entry("notifications/notif-DID_RENEW-none-Sandbox-2.jws"))
        let verifier = try Self.verifier(for: base, roots: [g3])
        let error = await #expect(throws: VerificationError.self) { try await verifier.verifyNotification(try AppleVectors.text(entry.file)) }
        #expect(error?.code == Self.derivedCodes[entry.file], "\(String(describing: error))")
    }

    /// No top-level signedDate: like Apple's library, the chain is checked at the current time,
    /// which the 2021 leaf no longer passes; at a time inside its validity it verifies.
    @Test func edgeSampleIsCheckedAtTheCurrentTime() async throws {
        let entry = try #require(AppleVectors.entries(folders: ["edge"]).first)
        let token = try AppleVectors.text(entry.file)
        let today = try Self.verifier(for: entry, roots: [g3])
        let error = await #expect(throws: VerificationError.self) { try await today.verifyNotification(token) }
        #expect(error?.code == .invalidChain)
        #expect(error?.reason.contains("expired") == true)

        let thenVerifier = try Self.verifier(for: entry, roots: [g3], clock: Self.clock(at: entry))
        #expect(try await Self.verify(entry, with: thenVerifier) == Facts(entry))
    }

    // MARK: - helpers

    struct Facts: Equatable, CustomStringConvertible {
        var notificationType, subtype, notificationUUID, environment, bundleId: String?
        var appAppleId: Int64?
        var signedDateMilliseconds: Int64?
        var transactionId, originalTransactionId, productId, type: String?

        init(
            notificationType: String? = nil, subtype: String? = nil, notificationUUID: String? = nil, environment: String?,
            bundleId: String? = nil, appAppleId: Int64? = nil, signedDate: Date?, transactionId: String? = nil,
            originalTransactionId: String? = nil, productId: String? = nil, type: String? = nil
        ) {
            self.notificationType = notificationType
            self.subtype = subtype
            self.notificationUUID = notificationUUID
            self.environment = environment
            self.bundleId = bundleId
            self.appAppleId = appAppleId
            self.signedDateMilliseconds = signedDate.map { Int64(($0.timeIntervalSince1970 * 1000).rounded()) }
            self.transactionId = transactionId
            self.originalTransactionId = originalTransactionId
            self.productId = productId
            self.type = type
        }

        init(_ entry: AppleVectors.Entry) {
            let parser = ISO8601DateFormatter()
            parser.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            self.init(
                notificationType: entry.notificationType, subtype: entry.subtype, notificationUUID: entry.notificationUUID,
                environment: entry.environment, bundleId: entry.bundleId, appAppleId: entry.appAppleId,
                signedDate: entry.signedDate.flatMap(parser.date(from:)), transactionId: entry.transactionId,
                originalTransactionId: entry.originalTransactionId, productId: entry.productId, type: entry.type)
        }

        var description: String {
            "\(notificationType ?? "-")/\(subtype ?? "-") \(environment ?? "-") \(bundleId ?? "-") \(appAppleId.map(String.init) ?? "-") "
                + "\(signedDateMilliseconds.map(String.init) ?? "-") \(transactionId ?? "-")/\(originalTransactionId ?? "-") "
                + "\(productId ?? "-") \(type ?? "-")"
        }
    }

    /// Verifies a sample with the method of its kind and reduces the result to comparable facts.
    static func verify(
        _ entry: AppleVectors.Entry, with verifier: SignedDataVerifier, expecting environment: AppStoreEnvironment? = nil
    ) async throws -> Facts {
        let token = try AppleVectors.text(entry.file)
        switch entry.kind {
        case "notification":
            let n = try await verifier.verifyNotification(token, expectedEnvironment: environment)
            return Facts(
                notificationType: n.rawNotificationType, subtype: n.rawSubtype, notificationUUID: n.notificationUUID,
                environment: n.data?.rawEnvironment, bundleId: n.data?.bundleId, appAppleId: n.data?.appAppleId,
                signedDate: n.signedDate)
        case "transaction":
            let t = try await verifier.verifyTransaction(token, expectedEnvironment: environment)
            return Facts(
                environment: t.rawEnvironment, bundleId: t.bundleId, signedDate: t.signedDate, transactionId: t.transactionId,
                originalTransactionId: t.originalTransactionId, productId: t.productId, type: t.rawType)
        case "renewalInfo":
            let r = try await verifier.verifyRenewalInfo(token, expectedEnvironment: environment)
            return Facts(
                environment: r.rawEnvironment, signedDate: r.signedDate, originalTransactionId: r.originalTransactionId,
                productId: r.productId)
        case "appTransaction":
            let a = try await verifier.verifyAppTransaction(token, expectedEnvironment: environment)
            return Facts(environment: a.rawReceiptType, bundleId: a.bundleId, appAppleId: a.appAppleId, signedDate: nil)
        default:
            Issue.record("unknown kind \(entry.kind ?? "nil") in \(entry.file)")
            return Facts(environment: nil, signedDate: nil)
        }
    }

    /// A verifier for one sample's app: bundle and app ids come from the sample (or its parent
    /// notification); renewal infos name no app, and transactions carry no appAppleId, so those
    /// settings only have to satisfy the configuration rules there.
    static func verifier(
        for entry: AppleVectors.Entry, roots: [X509Certificate], allowTestRoots: Bool = false,
        environment: AppStoreEnvironment? = nil, allowXcode: Bool = false, clock: any WallClock = SystemClock(),
        metrics: MetricsRegistry = MetricsRegistry()
    ) throws -> SignedDataVerifier {
        let parent = entry.parent.flatMap(AppleVectors.entry)
        let environment = try environment ?? #require(entry.environment.flatMap(AppStoreEnvironment.init(rawValue:)))
        let configuration = AppStoreVerifierConfiguration(
            bundleId: entry.bundleId ?? parent?.bundleId ?? "renewal.info.names.no.app",
            appAppleId: entry.appAppleId ?? parent?.appAppleId ?? (environment == .production ? 1 : nil),
            environment: environment, rootCertificates: roots, allowTestRoots: allowTestRoots, allowXcode: allowXcode)
        return try SignedDataVerifier(
            configuration: configuration, clock: clock, logger: Logger(label: "test", sink: .memory()), metrics: metrics)
    }

    /// The real clock, except for samples without signedDate (checked at "now"): a clock stopped
    /// at the manifest's effective date (the nested signedDate).
    static func clock(at entry: AppleVectors.Entry) -> any WallClock {
        guard entry.signedDate == nil, let effective = entry.effectiveDate else { return SystemClock() }
        let parser = ISO8601DateFormatter()
        parser.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return parser.date(from: effective).map { ManualClock($0) } ?? SystemClock()
    }
}
