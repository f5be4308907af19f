import AppStoreTestSupport
import Crypto
import Foundation
import ServiceRuntime
import TestSupport
import Testing

/// The service binaries' options as an operator types them: `--version`, `--help`,
/// `--check-config` (which connects to nothing), and a refusal of anything else.
@Suite(.timeLimit(.minutes(2)))
struct ServiceFlagsTests {
    /// Runs a service binary to its end; its status and everything it wrote.
    static func run(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) async throws -> (
        status: Int32?, output: String
    ) {
        let process = try ServiceProcess(executable: executable, name: "\(executable)-flags", environment: environment, arguments: arguments)
        let status = await process.waitForExit(timeout: 60)
        return (status, process.output)
    }

    /// Every setting either service needs, valid, but naming a database and a broker nobody
    /// listens on: a check that connected would fail.
    static func validEnvironment() throws -> [String: String] {
        var environment = try TestAppleSigner().verifierEnvironment(bundleId: "com.example.flags")
        environment.merge([
            "DATABASE_URL": "postgresql://subs@127.0.0.1:1/nothing", "KAFKA_BROKERS": "127.0.0.1:1",
            "PAYLOAD_ENCRYPTION_KEYS": "k1:" + Data(SecureRandom.bytes(32)).base64EncodedString(),
            "CURSOR_SIGNING_KEY": Data(SecureRandom.bytes(32)).base64EncodedString(),
            "USER_TOKEN_HS256_SECRET": String(repeating: "s", count: 32), "USER_TOKEN_PUBLIC_KEY_PATH": "",
            "ADMIN_TOKENS": "", "SERVICE_TOKENS": "", "LOG_LEVEL": "info",
        ]) { _, new in new }
        return environment
    }

    @Test(arguments: ["ingress", "fulfillment"])
    func versionAndHelpAnswerWithoutStarting(executable: String) async throws {
        let version = try await Self.run(executable, ["--version"])
        #expect(version.status == 0)
        #expect(version.output == BuildInfo.versionLine(of: executable) + "\n", "\(version.output)")
        let help = try await Self.run(executable, ["--help"])
        #expect(help.status == 0)
        #expect(help.output.hasPrefix("usage: \(executable) "), "\(help.output)")
        #expect(help.output.contains("README.md"))
        let unknown = try await Self.run(executable, ["--port", "8080"])
        #expect(unknown.status == 2)
        #expect(unknown.output.contains("\(executable): unknown argument '--port'"), "\(unknown.output)")
    }

    /// A delivery-only worker (`FULFILLMENT_ENABLED=false`) is valid only when it delivers webhooks.
    @Test func aWorkerWithoutFulfillmentMustDeliverWebhooks() async throws {
        var deliveryOnly = try Self.validEnvironment()
        deliveryOnly["FULFILLMENT_ENABLED"] = "false"
        let good = try await Self.run("fulfillment", ["--check-config"], environment: deliveryOnly)
        #expect(good.status == 0, "\(good.output)")
        for off in ["WEBHOOK_DELIVERY_ENABLED", "OUTBOUND_EVENTS_ENABLED"] {
            var idle = deliveryOnly
            idle[off] = "false"
            let bad = try await Self.run("fulfillment", ["--check-config"], environment: idle)
            #expect(bad.status == 2, "\(off): \(bad.output)")
            #expect(bad.output.contains("FULFILLMENT_ENABLED: invalid value 'false'"), "\(off): \(bad.output)")
        }
    }

    @Test(arguments: ["ingress", "fulfillment"])
    func checkConfigValidatesLikeStartUpAndConnectsToNothing(executable: String) async throws {
        let good = try await Self.run(executable, ["--check-config"], environment: try Self.validEnvironment())
        #expect(good.status == 0, "\(good.output)")
        #expect(good.output == "configuration ok\n", "\(good.output)")

        var broken = try Self.validEnvironment()
        broken.merge(["KAFKA_BROKERS": "nohost", "DATABASE_URL": "mysql://nope", "LOG_LEVEL": "loud"]) { _, new in new }
        let bad = try await Self.run(executable, ["--check-config"], environment: broken)
        #expect(bad.status == 2)
        for problem in ["KAFKA_BROKERS: invalid value 'nohost'", "DATABASE_URL: invalid value", "LOG_LEVEL: invalid value 'loud'"] {
            #expect(bad.output.contains(problem), "\(problem): \(bad.output)")
        }
        #expect(!bad.output.contains("configuration ok"))
    }
}
