import AppStore
import AppStoreTestSupport
import Foundation
import Testing

/// Get Retention Message requests (Retention Messaging API): they name no bundle, so the app is
/// their appAppleId, checked whenever one is configured; the rest is a notification's checks.
@Suite struct RealtimeRequestTests {
    let signer: TestAppleSigner

    init() throws { signer = try TestAppleSigner() }

    /// Apple's documented DecodedRealtimeRequestBody fields.
    func request(appAppleId: Int64?, environment: AppStoreEnvironment = .sandbox) throws -> (DecodedRealtimeRequestBody, String) {
        var body = DecodedRealtimeRequestBody()
        body.originalTransactionId = "99371282"
        body.appAppleId = appAppleId
        body.productId = "com.example.product"
        body.userLocale = "en-US"
        body.requestIdentifier = "3db5c98d-8acf-4e29-831e-8e1f82f9f6e9"
        body.signedDate = Date(timeIntervalSince1970: Double(Int(Date().timeIntervalSince1970)))
        body.environment = environment
        return (body, try signer.sign(body))
    }

    func code(_ token: String, _ verifier: SignedDataVerifier, _ environment: AppStoreEnvironment? = nil) async -> VerificationError.Code? {
        do {
            _ = try await verifier.verifyRealtimeRequest(token, expectedEnvironment: environment)
            return nil
        } catch { return error.code }
    }

    @Test func aRequestOfTheConfiguredAppVerifiesAsApplesFields() async throws {
        let verifier = try makeVerifier(trusting: signer, appAppleId: 531_412)
        let (body, token) = try request(appAppleId: 531_412)
        #expect(try await verifier.verifyRealtimeRequest(token) == body)
        // The raw JSON Apple's libraries decode the same request from, field by field.
        let raw = try JSONSerialization.jsonObject(with: Data(try AppStoreJSON.encoder().encode(body))) as? [String: Any]
        #expect(
            Set(raw?.keys.map { $0 } ?? [])
                == ["originalTransactionId", "appAppleId", "productId", "userLocale", "requestIdentifier", "signedDate", "environment"])
    }

    @Test func anotherOrAMissingAppAppleIdIsRefusedWheneverOneIsConfigured() async throws {
        let sandbox = try makeVerifier(trusting: signer, appAppleId: 531_412)
        #expect(await code(try request(appAppleId: 42).1, sandbox) == .invalidApp)
        #expect(await code(try request(appAppleId: nil).1, sandbox) == .invalidApp)
        // Sandbox without a configured id takes any (as notifications do); Production always checks.
        #expect(await code(try request(appAppleId: 42).1, try makeVerifier(trusting: signer)) == nil)
        let production = try makeVerifier(trusting: signer, environment: .production)
        #expect(await code(try request(appAppleId: 42, environment: .production).1, production) == .invalidApp)
        #expect(await code(try request(appAppleId: 1234, environment: .production).1, production) == nil)
    }

    @Test func anotherEnvironmentOrChainIsRefused() async throws {
        let verifier = try makeVerifier(trusting: signer, appAppleId: 531_412)
        let production = try request(appAppleId: 531_412, environment: .production).1
        #expect(await code(production, verifier) == .invalidEnvironment)
        let foreign = try TestAppleSigner().sign(try request(appAppleId: 531_412).0)
        #expect(await code(foreign, verifier) == .invalidChain)
    }
}
