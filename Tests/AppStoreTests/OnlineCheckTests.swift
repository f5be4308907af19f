import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import ServiceRuntime
import TestSupport
import Testing

/// APPLE_IAP_ONLINE_CHECKS=true against local OCSP responders for a test chain.
@Suite struct OnlineCheckTests {
    static let bundleId = "com.example.app"

    /// A responder, a signer whose certificates name it, and a token signed by that chain.
    struct Setup {
        let ocsp: TestOCSPServer
        let signer: TestAppleSigner
        let token: String
        let clock: ManualClock

        /// Runs `body` with a setup whose OCSP server is shut down after it (also on throw).
        @discardableResult
        static func with<R>(validity: TimeInterval? = 3600, _ body: (Setup) async throws -> R) async throws -> R {
            try await withResource({ try Setup(validity: validity) }, cleanUp: { await $0.ocsp.shutdown() }, body)
        }

        init(validity: TimeInterval? = 3600, signedDate: Date = Date()) throws {
            clock = ManualClock(Date())
            ocsp = TestOCSPServer(clock: clock, validity: validity)
            let base = try ocsp.start()
            signer = try TestAppleSigner(options: .init(ocspResponderBaseURL: base))
            ocsp.serve(signer)
            token = try signer.sign(
                TestPayloads.transaction(bundleId: OnlineCheckTests.bundleId, environment: .sandbox, signedDate: signedDate))
        }

        func verifier(online: Bool = true, timeout: Duration = .seconds(2)) throws -> SignedDataVerifier {
            var configuration = signer.verifierConfiguration(bundleId: OnlineCheckTests.bundleId)
            configuration.onlineChecks = online
            return try SignedDataVerifier(
                configuration: configuration, clock: clock, logger: Logger(label: "test", level: .critical), metrics: MetricsRegistry(),
                onlineCheckTimeout: timeout)
        }

        func code(_ verifier: SignedDataVerifier) async -> VerificationError.Code? {
            do {
                _ = try await verifier.verifyTransaction(token)
                return nil
            } catch { return error.code }
        }
    }

    @Test func goodAnswersPassAndAreCachedUntilNextUpdate() async throws {
        try await Setup.with(validity: 600) { setup in
            let verifier = try setup.verifier()
            #expect(await setup.code(verifier) == nil)
            #expect(setup.ocsp.requests(.intermediate) == 1 && setup.ocsp.requests(.root) == 1)
            setup.clock.advance(by: 300)
            #expect(await setup.code(verifier) == nil)
            #expect(setup.ocsp.requests(.intermediate) == 1 && setup.ocsp.requests(.root) == 1)
            setup.clock.advance(by: 301)
            #expect(await setup.code(verifier) == nil)
            #expect(setup.ocsp.requests(.intermediate) == 2 && setup.ocsp.requests(.root) == 2)
        }
    }

    @Test func answersWithoutNextUpdateAreNotKeptLong() async throws {
        try await Setup.with(validity: nil) { setup in
            let verifier = try setup.verifier()
            #expect(await setup.code(verifier) == nil)
            setup.clock.advance(by: 120)
            #expect(await setup.code(verifier) == nil)
            #expect(setup.ocsp.requests(.intermediate) == 2)
        }
    }

    @Test(arguments: [TestOCSPServer.Responder.intermediate, .root])
    func aRevokedCertificateIsAnInvalidChain(responder: TestOCSPServer.Responder) async throws {
        try await Setup.with { setup in
            setup.ocsp.set(.status(.revoked), for: responder)
            let verifier = try setup.verifier()
            #expect(await setup.code(verifier) == .invalidChain)
            // Never cached as a pass: asking again asks the responder again.
            #expect(await setup.code(verifier) == .invalidChain)
            #expect(setup.ocsp.requests(responder) == 2)
        }
    }

    @Test(arguments: [
        TestOCSPServer.Behaviour.status(.unknown), .httpError(500), .httpError(404), .unsuccessful(3), .garbage, .wrongSigner,
    ])
    func anAnswerThatCannotBeTrustedIsRetryable(behaviour: TestOCSPServer.Behaviour) async throws {
        try await Setup.with { setup in
            setup.ocsp.set(behaviour, for: .intermediate)
            let verifier = try setup.verifier()
            #expect(await setup.code(verifier) == .retryableVerification)
            // Once the responder is healthy again, the same token verifies.
            setup.ocsp.set(.status(.good), for: .intermediate)
            #expect(await setup.code(verifier) == nil)
        }
    }

    @Test func aSlowResponderTimesOutRetryably() async throws {
        try await Setup.with { setup throws in
            setup.ocsp.set(.delayed(.seconds(3)), for: .root)
            #expect(await setup.code(try setup.verifier(timeout: .milliseconds(300))) == .retryableVerification)
        }
    }

    @Test func anUnreachableResponderIsRetryableNeverAPass() async throws {
        let setup = try Setup()
        await setup.ocsp.shutdown()
        let verifier = try setup.verifier()
        for _ in 0..<3 { #expect(await setup.code(verifier) == .retryableVerification) }
        // Offline, the same token verifies: only the online check failed.
        #expect(await setup.code(try setup.verifier(online: false)) == nil)
    }

    @Test func aChainWithoutResponderCannotPassOnline() async throws {
        let signer = try TestAppleSigner()
        var configuration = signer.verifierConfiguration(bundleId: Self.bundleId)
        configuration.onlineChecks = true
        let verifier = try SignedDataVerifier(
            configuration: configuration, logger: Logger(label: "test", level: .critical), metrics: MetricsRegistry())
        let token = try signer.sign(TestPayloads.transaction(bundleId: Self.bundleId, environment: .sandbox))
        let error = await #expect(throws: VerificationError.self) { try await verifier.verifyTransaction(token) }
        #expect(error?.code == .invalidChain && error?.reason.contains("OCSP") == true)
    }

    @Test func onlineChecksUseTheCurrentTimeNotSignedDate() async throws {
        // The leaf expired a day ago; the data was signed while it was valid.
        let now = Date()
        try await withResource({ TestOCSPServer() }, cleanUp: { await $0.shutdown() }) { ocsp in
            let base = try ocsp.start()
            let signer = try TestAppleSigner(options: .init(leafValidity: (now - 30 * 86400)...(now - 86400), ocspResponderBaseURL: base))
            ocsp.serve(signer)
            let token = try signer.sign(TestPayloads.transaction(bundleId: Self.bundleId, environment: .sandbox, signedDate: now - 10 * 86400))
            var configuration = signer.verifierConfiguration(bundleId: Self.bundleId)
            let offline = try SignedDataVerifier(
                configuration: configuration, logger: Logger(label: "test", level: .critical), metrics: MetricsRegistry())
            _ = try await offline.verifyTransaction(token)
            configuration.onlineChecks = true
            let online = try SignedDataVerifier(
                configuration: configuration, logger: Logger(label: "test", level: .critical), metrics: MetricsRegistry())
            let error = await #expect(throws: VerificationError.self) { try await online.verifyTransaction(token) }
            #expect(error?.code == .invalidChain)
            #expect(ocsp.requests(.intermediate) == 0)
        }
    }
}
