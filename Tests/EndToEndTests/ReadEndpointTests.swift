import Crypto
import Foundation
import Postgres
import ServiceRuntime
import TestSupport
import Testing

/// The running ingress accepts the user tokens the `subsctl` binary makes (the read routes
/// themselves are tested without processes, in IngressAppTests).
@Suite(.timeLimit(.minutes(3)))
struct ReadEndpointTests {
    @Test func acceptsTheTokensOfSubsctlDevToken() async throws {
        try await IngressHarness.with { harness in
            let process = Process()
            process.executableURL = ServiceProcess.binaryDirectory.appendingPathComponent("subsctl")
            process.arguments = ["dev-token", "--user", "local-user", "--ttl", "120"]
            process.environment = ["USER_TOKEN_HS256_SECRET": harness.userTokenSecret]
            let output = Pipe()
            process.standardOutput = output
            try process.run()
            let token = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).trimmingCharacters(in: .newlines)
            process.waitUntilExit()
            #expect(process.terminationStatus == 0)
            let response = try await harness.client.get("/api/v1/credits/balance", headers: ["Authorization": "Bearer \(token)"])
            #expect(response.status == 200, "\(response.text)")
        }
    }
}
