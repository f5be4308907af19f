import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import TestSupport
import Testing

/// Runs the built `subsctl` binary (SUBS_BIN_DIR, else .build/debug) and captures its output.
struct Subsctl {
    struct MissingBinary: Error, CustomStringConvertible {
        let path: String
        var description: String { "executable \(path) is missing: build with `swift build` first" }
    }

    struct Run {
        let status: Int32
        let stdout: String
        let stderr: String
        /// The last line on stderr: the error, after any log lines (e.g. the test-root warning).
        var error: String { String(stderr.split(separator: "\n").last ?? "") }
    }

    /// Runs subsctl and waits for it off the concurrency pool (`blocking`).
    static func run(_ arguments: [String], environment: [String: String], stdin: String? = nil) async throws -> Run {
        try await blocking { try runWaiting(arguments, environment: environment, stdin: stdin) }
    }

    private static func runWaiting(_ arguments: [String], environment: [String: String], stdin: String?) throws -> Run {
        let binary = ServiceProcess.binaryDirectory.appendingPathComponent("subsctl")
        guard FileManager.default.isExecutableFile(atPath: binary.path) else {
            throw MissingBinary(path: binary.path)
        }
        let process = Process()
        process.executableURL = binary
        process.arguments = arguments
        // Only what the test gives: inherited APPLE_IAP_* settings must not leak in.
        process.environment = environment.merging(["PATH": "/usr/bin:/bin", "LOG_LEVEL": "warning"]) { own, _ in own }
        // stderr goes to a file: two pipes read one after the other could block the child.
        let errorFile = FileManager.default.temporaryDirectory.appendingPathComponent("subsctl-err-\(UUID().uuidString)")
        _ = FileManager.default.createFile(atPath: errorFile.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: errorFile) }
        let out = Pipe()
        let input = Pipe()
        process.standardOutput = out
        process.standardError = try FileHandle(forWritingTo: errorFile)
        process.standardInput = input
        try process.run()
        if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
        try input.fileHandleForWriting.close()
        let stdoutData = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Run(
            status: process.terminationStatus, stdout: String(decoding: stdoutData, as: UTF8.self),
            stderr: (try? String(contentsOf: errorFile, encoding: .utf8)) ?? "")
    }
}

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
        let run = try await Subsctl.run(["verify", "--kind", "notification", try file(notification)], environment: environment)
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
        let run = try await Subsctl.run(["verify", "--kind", "notification", "--expect-env", "Sandbox", "-"], environment: environment, stdin: body)
        #expect(run.status == 0, "\(run.stderr)")
        #expect(try json(run.stdout)["payload"] != nil)
    }

    @Test func eachKindVerifies() async throws {
        let renewal = TestPayloads.renewalInfo(environment: .sandbox, originalTransactionId: "7")
        for (kind, token) in [("transaction", try signer.sign(transaction)), ("renewal", try signer.sign(renewal))] {
            let run = try await Subsctl.run(["verify", "--kind", kind, try file(token)], environment: environment)
            #expect(run.status == 0, "\(kind): \(run.stderr)")
            #expect(try json(run.stdout)["kind"] as? String == kind)
        }
    }

    @Test func refusalsPrintTheCodeAndReasonAndFail() async throws {
        var tampered = Array(notification.utf8)
        let index = notification.split(separator: ".")[0].utf8.count + 40
        tampered[index] = tampered[index] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        let bad = try await Subsctl.run(
            ["verify", "--kind", "notification", try file(String(decoding: tampered, as: UTF8.self))], environment: environment)
        #expect(bad.status == 1)
        #expect(bad.error.hasPrefix("INVALID_SIGNATURE: ") || bad.error.hasPrefix("MALFORMED: "), "\(bad.stderr)")
        #expect(bad.stdout.isEmpty)

        let production = try await Subsctl.run(
            ["verify", "--kind", "notification", "--expect-env", "Production", try file(notification)], environment: environment)
        #expect(production.status == 1 && production.error.hasPrefix("INVALID_ENVIRONMENT: "), "\(production.stderr)")

        let otherApp = try signer.verifierEnvironment(bundleId: "com.example.other")
        let foreign = try await Subsctl.run(["verify", "--kind", "notification", try file(notification)], environment: otherApp)
        #expect(foreign.status == 1 && foreign.error.hasPrefix("INVALID_APP: "), "\(foreign.stderr)")

        let garbage = try await Subsctl.run(["verify", "--kind", "transaction", try file("not a token")], environment: environment)
        #expect(garbage.status == 1 && garbage.error.hasPrefix("MALFORMED: "), "\(garbage.stderr)")
    }

    @Test func badUsageAndConfigurationAreReported() async throws {
        let token = try file(notification)
        for arguments in [
            ["verify", token], ["verify", "--kind", "receipt", token], ["verify", "--kind", "notification"],
            ["verify", "--kind", "notification", "--expect-env", "Xcode", token],
            ["verify", "--kind", "notification", "--bogus", "1", token], ["frobnicate"], [],
        ] {
            let run = try await Subsctl.run(arguments, environment: environment)
            #expect(run.status == 64, "\(arguments): \(run.stderr)")
            #expect(run.stderr.contains("usage:"))
        }
        let unconfigured = try await Subsctl.run(["verify", "--kind", "notification", token], environment: [:])
        #expect(unconfigured.status == 78)
        #expect(unconfigured.stderr.contains("APPLE_IAP_BUNDLE_ID") && unconfigured.stderr.contains("APPLE_IAP_ROOT_CERTS"))
        let missing = try await Subsctl.run(["verify", "--kind", "notification", "/nonexistent/file"], environment: environment)
        #expect(missing.status == 66)
    }

    @Test func benchPrintsVerificationsPerSecondLast() async throws {
        let run = try await Subsctl.run(
            ["bench", "verify", "--kind", "notification", "--seconds", "0.3", try file(notification), try file(notification)],
            environment: environment)
        #expect(run.status == 0, "\(run.stderr)")
        let last = try #require(run.stdout.split(separator: "\n").last)
        #expect(last.hasPrefix("verifications_per_second="))
        #expect((Int(last.dropFirst("verifications_per_second=".count)) ?? 0) > 0)
        // A payload that does not verify is refused before anything is timed.
        let refused = try await Subsctl.run(
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
        let run = try await Subsctl.run(
            ["verify", "--kind", "notification", directory.appendingPathComponent("notifications/notif-DID_RENEW-none-Sandbox-2.json").path],
            environment: environment)
        #expect(run.status == 0, "\(run.stderr)")
        let output = try json(run.stdout)
        #expect((output["payload"] as? [String: Any])?["notificationType"] as? String == "DID_RENEW")
        #expect((output["signedTransactionInfo"] as? [String: Any])?["transactionId"] as? String == "2000001024998954")
    }
}
