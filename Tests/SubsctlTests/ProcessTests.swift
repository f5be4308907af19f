import AppStore
import AppStoreTestSupport
import Foundation
import Testing

/// The built binary, for what only a process shows: the status it exits with and which of its
/// descriptors each piece of text reaches (stdout the result alone, stderr the rest), with stdin
/// read from a pipe. What the commands do is tested in process.
@Suite struct ProcessTests {
    /// One run: the arguments and environment, the exit status, and text each stream must hold
    /// (nil: the stream stays empty).
    struct Case: Sendable, CustomTestStringConvertible {
        let arguments: [String]
        var environment: [String: String] = [:]
        let status: Int32
        let stdout: String?
        let stderr: String?
        var testDescription: String { arguments.joined(separator: " ") }
    }

    static let secret = ["USER_TOKEN_HS256_SECRET": String(repeating: "s", count: 32)]

    @Test(arguments: [
        Case(arguments: [], status: 64, stdout: nil, stderr: "usage: subsctl <command>"),
        Case(arguments: ["help"], status: 0, stdout: "usage: subsctl <command>", stderr: nil),
        Case(arguments: ["--version"], status: 0, stdout: "subsctl ", stderr: nil),
        Case(arguments: ["chain"], status: 64, stdout: nil, stderr: "subsctl chain attribute"),
        Case(arguments: ["chain", "--help"], status: 0, stdout: "subsctl chain attribute", stderr: nil),
        Case(arguments: ["frobnicate"], status: 64, stdout: nil, stderr: "unknown command 'frobnicate'"),
        Case(
            arguments: ["dev-token", "--user-id", "u1", "--typo", "x"], environment: secret, status: 64, stdout: nil, stderr: "unknown option --typo"),
        Case(arguments: ["dev-token", "--user", "u1"], environment: secret, status: 0, stdout: ".", stderr: "--user is deprecated"),
        Case(
            arguments: ["requery", "--original-transaction-id", "1000", "--env", "Sandbox"], status: 78, stdout: nil,
            stderr: "DATABASE_URL is not set"),
        Case(arguments: ["verify", "--kind", "notification", "/nonexistent/file"], status: 66, stdout: nil, stderr: "cannot read /nonexistent/file"),
    ])
    func exitStatusAndStreams(_ expected: Case) async throws {
        let run = try await SubsctlBinary.run(expected.arguments, environment: expected.environment)
        #expect(run.status == expected.status, "\(run.stderr)")
        for (name, text, wanted) in [("stdout", run.stdout, expected.stdout), ("stderr", run.stderr, expected.stderr)] {
            if let wanted { #expect(text.contains(wanted), "\(name): \(text)") } else { #expect(text.isEmpty, "\(name): \(text)") }
        }
    }

    @Test func verifyReadsStdinAndAnswersOnStdoutOrFailsOnStderr() async throws {
        let signer = try TestAppleSigner()
        let environment = try signer.verifierEnvironment(bundleId: "com.example.app")
        let transaction = try signer.sign(TestPayloads.transaction(bundleId: "com.example.app", environment: .sandbox))
        let verified = try await SubsctlBinary.run(["verify", "--kind", "transaction", "-"], environment: environment, stdin: transaction)
        #expect(verified.status == 0, "\(verified.stderr)")
        #expect(verified.stdout.contains("\"kind\" : \"transaction\""), "\(verified.stdout)")
        let refused = try await SubsctlBinary.run(["verify", "--kind", "transaction", "-"], environment: environment, stdin: "not a token")
        #expect(refused.status == 1 && refused.stdout.isEmpty)
        #expect(refused.error.hasPrefix("MALFORMED: "), "\(refused.stderr)")
    }
}
