import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import Testing

/// `subsctl demo-signer init` and `subsctl bench sign-notifications`: the local demo's simulated Apple.
@Suite struct DemoSignerCommandTests {
    let root = FileManager.default.temporaryDirectory.appendingPathComponent("demo-signer-tests-\(UUID().uuidString)")

    @Test func initCreatesOnceAndPrintsTheRootPath() async throws {
        defer { try? FileManager.default.removeItem(at: root) }
        let directory = root.appendingPathComponent("secrets/signer")
        let first = await SubsctlInProcess.run(["demo-signer", "init", "--dir", directory.path], environment: [:])
        #expect(first.status == 0, "\(first.stderr)")
        let rootPath = first.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(rootPath == TestAppleSigner.rootCertificatePath(in: directory))
        let created = try TestAppleSigner(loadingFrom: directory)

        let second = await SubsctlInProcess.run(["demo-signer", "init", "--dir", directory.path], environment: [:])
        #expect(second.status == 0 && second.stdout == first.stdout, "\(second.stderr)")
        #expect(try TestAppleSigner(loadingFrom: directory).x5c == created.x5c, "an existing signer is kept")
    }

    @Test func initRefusesASharedDirectoryAndBadUsage() async throws {
        defer { try? FileManager.default.removeItem(at: root) }
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        let shared = await SubsctlInProcess.run(["demo-signer", "init", "--dir", root.path], environment: [:])
        #expect(shared.status == 78 && shared.stderr.contains("accessible to others"), "\(shared.stderr)")
        for arguments in [
            ["demo-signer", "init"], ["demo-signer", "init", "--dir", root.path, "extra"],
            ["bench", "sign-notifications", "--signer-dir", root.path, "--count", "0", "--out", "/dev/null"],
        ] {
            #expect(await SubsctlInProcess.run(arguments, environment: [:]).status == 64, "\(arguments)")
        }
        let help = await SubsctlInProcess.run(["help"], environment: [:])
        #expect(help.stdout.contains("trusted only with APPLE_IAP_ALLOW_TEST_ROOTS=true"))
    }

    @Test func signNotificationsWritesDistinctBodiesTheDemoRootVerifies() async throws {
        defer { try? FileManager.default.removeItem(at: root) }
        let directory = root.appendingPathComponent("signer")
        let rootPath = await SubsctlInProcess.run(["demo-signer", "init", "--dir", directory.path], environment: [:])
            .stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let out = root.appendingPathComponent("bodies.jsonl")
        // A process of its own: the signing spreads over every core, and in this process it would
        // hold the concurrency pool that the suites running beside it wait on.
        let run = try await SubsctlBinary.run(
            ["bench", "sign-notifications", "--signer-dir", directory.path, "--count", "1203", "--out", out.path], environment: [:])
        #expect(run.status == 0, "\(run.stderr)")
        #expect(run.stdout.contains("bodies=1203"))

        let lines = try String(contentsOf: out, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 1203)
        var uuids = Set<String>()
        for line in lines {
            let body = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])
            let segments = try #require(body["signedPayload"]).split(separator: ".")
            let bytes = try #require(Base64URL.decode(segments[1]))
            let payload = try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
            uuids.insert(try #require(payload["notificationUUID"] as? String))
        }
        #expect(uuids.count == 1203, "every body is a distinct notification")

        let environment = [
            "APPLE_IAP_BUNDLE_ID": "com.example.subscriptions", "APPLE_IAP_ENV": "Sandbox", "APPLE_IAP_ROOT_CERTS": rootPath,
            "APPLE_IAP_ALLOW_TEST_ROOTS": "true",
        ]
        let verified = await SubsctlInProcess.run(["verify", "--kind", "notification", "-"], environment: environment, stdin: String(lines[1202]))
        #expect(verified.status == 0, "\(verified.stderr)")
        #expect(verified.stdout.contains("\"notificationType\" : \"DID_RENEW\"") && verified.stdout.contains("signedRenewalInfo"))
    }

    @Test func signNotificationsGivesTheAccountTokensInTurnAndTheProduct() async throws {
        defer { try? FileManager.default.removeItem(at: root) }
        let directory = root.appendingPathComponent("signer")
        _ = await SubsctlInProcess.run(["demo-signer", "init", "--dir", directory.path], environment: [:])
        let tokens = (0..<3).map { _ in UUID() }
        let tokenFile = root.appendingPathComponent("tokens.txt")
        try (tokens.map(\.uuidString).joined(separator: "\n") + "\n").write(to: tokenFile, atomically: true, encoding: .utf8)
        let out = root.appendingPathComponent("bodies.jsonl")
        let run = try await SubsctlBinary.run(
            [
                "bench", "sign-notifications", "--signer-dir", directory.path, "--count", "1100", "--out", out.path,
                "--product-id", "com.example.pro.monthly", "--account-tokens", tokenFile.path,
            ], environment: [:])
        #expect(run.status == 0, "\(run.stderr)")
        var seen: [String: Int] = [:]
        for line in try String(contentsOf: out, encoding: .utf8).split(separator: "\n") {
            let body = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])
            let signed = try #require(body["signedPayload"])
            let data = try #require(Self.claims(signed)["data"] as? [String: Any])
            let signedTransaction = try #require(data["signedTransactionInfo"] as? String)
            let transaction = Self.claims(signedTransaction)
            #expect(transaction["productId"] as? String == "com.example.pro.monthly")
            seen[try #require(transaction["appAccountToken"] as? String).uppercased(), default: 0] += 1
        }
        #expect(seen == Dictionary(uniqueKeysWithValues: tokens.enumerated().map { ($1.uuidString, $0 == 2 ? 366 : 367) }))

        try "not-a-uuid\n".write(to: tokenFile, atomically: true, encoding: .utf8)
        let refused = await SubsctlInProcess.run(
            ["bench", "sign-notifications", "--signer-dir", directory.path, "--count", "1", "--out", out.path, "--account-tokens", tokenFile.path],
            environment: [:])
        #expect(refused.status == 64 && refused.stderr.contains("is not a UUID"), "\(refused.stderr)")
    }

    /// The claims of a compact JWS, unverified (the test above verifies a body end to end).
    static func claims(_ jws: String) -> [String: Any] {
        let segments = jws.split(separator: ".")
        guard segments.count == 3, let bytes = Base64URL.decode(segments[1]) else { return [:] }
        return (try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]) ?? [:]
    }
}
