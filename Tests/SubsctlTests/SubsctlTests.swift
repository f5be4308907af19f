import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import TestSupport
import Testing

/// Apple's signed samples in `<repo>/../shared/appstore-vectors` (third-party data, read in place).
enum Vectors {
    static let directory: URL? = {
        var ancestor = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        while ancestor.path != "/" {
            ancestor = ancestor.deletingLastPathComponent()
            let candidate = ancestor.appendingPathComponent("shared/appstore-vectors")
            if FileManager.default.fileExists(atPath: candidate.appendingPathComponent("manifest.json").path) { return candidate }
        }
        return nil
    }()
}

@Suite struct SubsctlTests {
    static let bundleId = "com.example.app"
    let signer: TestAppleSigner
    let environment: [String: String]
    let transaction: JWSTransactionDecodedPayload
    let notification: String

    init() throws {
        signer = try TestAppleSigner()
        environment = try signer.verifierEnvironment(bundleId: Self.bundleId)
        transaction = TestPayloads.transaction(bundleId: Self.bundleId, environment: .sandbox)
        notification = try signer.signNotification(
            type: .subscribed, subtype: .initialBuy, bundleId: Self.bundleId, environment: .sandbox, transaction: transaction,
            renewalInfo: TestPayloads.renewalInfo(environment: .sandbox, originalTransactionId: transaction.originalTransactionId!))
    }

    func file(_ text: String) throws -> String {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("subsctl-\(UUID().uuidString).txt")
        try Data(text.utf8).write(to: url)
        return url.path
    }

    func json(_ text: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    }

    @Test func aNotificationPrintsItselfAndItsNestedData() async throws {
        let run = await SubsctlInProcess.run(["verify", "--kind", "notification", try file(notification)], environment: environment)
        #expect(run.status == 0, "\(run.stderr)")
        let output = try json(run.stdout)
        #expect(output["kind"] as? String == "notification")
        let payload = try #require(output["payload"] as? [String: Any])
        #expect(payload["notificationType"] as? String == "SUBSCRIBED" && payload["subtype"] as? String == "INITIAL_BUY")
        let nested = try #require(output["signedTransactionInfo"] as? [String: Any])
        #expect(nested["transactionId"] as? String == transaction.transactionId)
        let renewal = try #require(output["signedRenewalInfo"] as? [String: Any])
        #expect(renewal["originalTransactionId"] as? String == transaction.originalTransactionId)
    }

    @Test func aRequestBodyOnStdinIsAccepted() async throws {
        let body = "{\"signedPayload\":\"\(notification)\"}\n"
        let run = await SubsctlInProcess.run(
            ["verify", "--kind", "notification", "--expect-env", "Sandbox", "-"], environment: environment, stdin: body)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try json(run.stdout)["payload"] != nil)
    }

    @Test func eachKindVerifies() async throws {
        let renewal = TestPayloads.renewalInfo(environment: .sandbox, originalTransactionId: "7")
        for (kind, token) in [("transaction", try signer.sign(transaction)), ("renewal", try signer.sign(renewal))] {
            let run = await SubsctlInProcess.run(["verify", "--kind", kind, try file(token)], environment: environment)
            #expect(run.status == 0, "\(kind): \(run.stderr)")
            #expect(try json(run.stdout)["kind"] as? String == kind)
        }
    }

    @Test func refusalsPrintTheCodeAndReasonAndFail() async throws {
        var tampered = Array(notification.utf8)
        let index = notification.split(separator: ".")[0].utf8.count + 40
        tampered[index] = tampered[index] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        let bad = await SubsctlInProcess.run(
            ["verify", "--kind", "notification", try file(String(decoding: tampered, as: UTF8.self))], environment: environment)
        #expect(bad.status == 1)
        #expect(bad.error.hasPrefix("INVALID_SIGNATURE: ") || bad.error.hasPrefix("MALFORMED: "), "\(bad.stderr)")
        #expect(bad.stdout.isEmpty)

        let production = await SubsctlInProcess.run(
            ["verify", "--kind", "notification", "--expect-env", "Production", try file(notification)], environment: environment)
        #expect(production.status == 1 && production.error.hasPrefix("INVALID_ENVIRONMENT: "), "\(production.stderr)")

        let otherApp = try signer.verifierEnvironment(bundleId: "com.example.other")
        let foreign = await SubsctlInProcess.run(["verify", "--kind", "notification", try file(notification)], environment: otherApp)
        #expect(foreign.status == 1 && foreign.error.hasPrefix("INVALID_APP: "), "\(foreign.stderr)")

        let garbage = await SubsctlInProcess.run(["verify", "--kind", "transaction", try file("not a token")], environment: environment)
        #expect(garbage.status == 1 && garbage.error.hasPrefix("MALFORMED: "), "\(garbage.stderr)")
    }

    @Test func badUsageAndConfigurationAreReported() async throws {
        let token = try file(notification)
        for arguments in [
            ["verify", token], ["verify", "--kind", "receipt", token], ["verify", "--kind", "notification"],
            ["verify", "--kind", "notification", "--expect-env", "Xcode", token],
            ["verify", "--kind", "notification", "--bogus", "1", token], ["frobnicate"], [],
        ] {
            let run = await SubsctlInProcess.run(arguments, environment: environment)
            #expect(run.status == 64, "\(arguments): \(run.stderr)")
            #expect(run.stderr.contains("usage:"))
        }
        let unconfigured = await SubsctlInProcess.run(["verify", "--kind", "notification", token], environment: [:])
        #expect(unconfigured.status == 78)
        #expect(unconfigured.stderr.contains("APPLE_IAP_BUNDLE_ID") && unconfigured.stderr.contains("APPLE_IAP_ROOT_CERTS"))
        let missing = await SubsctlInProcess.run(["verify", "--kind", "notification", "/nonexistent/file"], environment: environment)
        #expect(missing.status == 66)
    }

    @Test func benchPrintsVerificationsPerSecondLast() async throws {
        let run = await SubsctlInProcess.run(
            ["bench", "verify", "--kind", "notification", "--seconds", "0.3", try file(notification), try file(notification)],
            environment: environment)
        #expect(run.status == 0, "\(run.stderr)")
        let last = try #require(run.stdout.split(separator: "\n").last)
        #expect(last.hasPrefix("verifications_per_second="))
        #expect((Int(last.dropFirst("verifications_per_second=".count)) ?? 0) > 0)
        // A payload that does not verify is refused before anything is timed.
        let refused = await SubsctlInProcess.run(
            ["bench", "verify", "--kind", "notification", "--seconds", "0.3", try file("x.y.z")], environment: environment)
        #expect(refused.status == 1 && !refused.stdout.contains("verifications_per_second"))
    }

    @Test(.enabled(if: Vectors.directory != nil, "SKIPPED: ../shared/appstore-vectors (Apple's signed samples) is absent"))
    func aGenuineAppleNotificationVerifiesAgainstAppleRootG3() async throws {
        let directory = try #require(Vectors.directory)
        let environment = [
            "APPLE_IAP_BUNDLE_ID": "com.loki-project.loki-messenger", "APPLE_IAP_ENV": "Sandbox",
            "APPLE_IAP_ROOT_CERTS": directory.appendingPathComponent("roots/AppleRootCA-G3.cer").path,
        ]
        let run = await SubsctlInProcess.run(
            ["verify", "--kind", "notification", directory.appendingPathComponent("notifications/notif-DID_RENEW-none-Sandbox-2.json").path],
            environment: environment)
        #expect(run.status == 0, "\(run.stderr)")
        let output = try json(run.stdout)
        #expect((output["payload"] as? [String: Any])?["notificationType"] as? String == "DID_RENEW")
        #expect((output["signedTransactionInfo"] as? [String: Any])?["transactionId"] as? String == "2000001024998954")
    }
}
