import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import ServiceRuntime
import Testing

@Suite struct ConfigurationTests {
    let signer: TestAppleSigner

    init() throws { signer = try TestAppleSigner() }

    @Test func readsEveryVariable() throws {
        var environment = try signer.verifierEnvironment(bundleId: "com.example.app", environment: .production, appAppleId: 42)
        environment["APPLE_IAP_ONLINE_CHECKS"] = "false"
        environment["APPLE_IAP_ALLOW_XCODE"] = "false"
        let configuration = try AppStoreVerifierConfiguration(environment: environment)
        #expect(configuration.bundleId == "com.example.app")
        #expect(configuration.appAppleId == 42)
        #expect(configuration.environment == .production)
        #expect(configuration.rootCertificates == [signer.root])
        #expect(configuration.allowTestRoots && !configuration.onlineChecks && !configuration.allowXcode)
        #expect(configuration.testRoots == [signer.root])
    }

    @Test func defaultsAreTheSafeOnes() throws {
        var environment = try signer.verifierEnvironment(bundleId: "com.example.app")
        environment["APPLE_IAP_ALLOW_TEST_ROOTS"] = "true"
        let configuration = try AppStoreVerifierConfiguration(environment: environment)
        #expect(!configuration.onlineChecks && !configuration.allowXcode)
    }

    @Test func aTestRootIsRefusedUnlessAllowed() throws {
        var environment = try signer.verifierEnvironment(bundleId: "com.example.app")
        environment["APPLE_IAP_ALLOW_TEST_ROOTS"] = nil
        let error = #expect(throws: ConfigurationError.self) { try AppStoreVerifierConfiguration(environment: environment) }
        #expect(error?.problems.map(\.name) == ["APPLE_IAP_ROOT_CERTS"])
        #expect(error?.description.contains("APPLE_IAP_ALLOW_TEST_ROOTS=true") == true)
        // Built in memory, the verifier refuses it as well.
        var configuration = signer.verifierConfiguration(bundleId: "com.example.app")
        configuration.allowTestRoots = false
        #expect(throws: ConfigurationError.self) { try SignedDataVerifier(configuration: configuration) }
    }

    @Test func trustingATestRootLogsALoudWarning() throws {
        let sink = LogSink.memory()
        _ = try SignedDataVerifier(
            configuration: signer.verifierConfiguration(bundleId: "com.example.app"), logger: Logger(label: "test", sink: sink))
        let warnings = sink.lines.filter { $0.contains("TEST ROOT CERTIFICATE TRUSTED") }
        #expect(warnings.count == 1)
        #expect(warnings.first?.contains("warning") == true)
        #expect(warnings.first?.contains(Self.hex(signer.root.sha256Fingerprint)) == true)
    }

    @Test func everyProblemIsReportedAtOnce() {
        let error = #expect(throws: ConfigurationError.self) {
            try AppStoreVerifierConfiguration(environment: [
                "APPLE_IAP_APPLE_ID": "abc", "APPLE_IAP_ENV": "Staging", "APPLE_IAP_ONLINE_CHECKS": "maybe",
            ])
        }
        let names = Set(error?.problems.map(\.name) ?? [])
        #expect(names == ["APPLE_IAP_BUNDLE_ID", "APPLE_IAP_APPLE_ID", "APPLE_IAP_ENV", "APPLE_IAP_ROOT_CERTS", "APPLE_IAP_ONLINE_CHECKS"])
    }

    @Test func inconsistentCombinationsDoNotStart() throws {
        let base = try signer.verifierEnvironment(bundleId: "com.example.app")
        let cases: [([String: String], String)] = [
            (["APPLE_IAP_ENV": "Production"], "APPLE_IAP_APPLE_ID"),
            (["APPLE_IAP_ENV": "Production", "APPLE_IAP_APPLE_ID": "1", "APPLE_IAP_ALLOW_XCODE": "true"], "APPLE_IAP_ALLOW_XCODE"),
            (["APPLE_IAP_ENV": "Xcode"], "APPLE_IAP_ALLOW_XCODE"),
            (["APPLE_IAP_ONLINE_CHECKS": "sometimes"], "APPLE_IAP_ONLINE_CHECKS"),
            (["APPLE_IAP_APPLE_ID": "-5"], "APPLE_IAP_APPLE_ID"),
            (["APPLE_IAP_ROOT_CERTS": "/nonexistent/root.cer"], "APPLE_IAP_ROOT_CERTS"),
            (["APPLE_IAP_ROOT_CERTS": " , "], "APPLE_IAP_ROOT_CERTS"),
        ]
        for (overrides, name) in cases {
            let environment = base.merging(overrides) { _, new in new }
            let error = #expect(throws: ConfigurationError.self, "\(overrides)") {
                try AppStoreVerifierConfiguration(environment: environment)
            }
            #expect(error?.problems.map(\.name) == [name], "\(overrides): \(String(describing: error))")
        }
        let xcode = base.merging(["APPLE_IAP_ENV": "xcode", "APPLE_IAP_ALLOW_XCODE": "true"]) { _, new in new }
        #expect(try AppStoreVerifierConfiguration(environment: xcode).environment == .xcode)
        let online = base.merging(["APPLE_IAP_ONLINE_CHECKS": "true"]) { _, new in new }
        #expect(try AppStoreVerifierConfiguration(environment: online).onlineChecks)
    }

    @Test func aLeafCertificateIsNotARoot() throws {
        var configuration = signer.verifierConfiguration(bundleId: "com.example.app")
        configuration.rootCertificates = [signer.leaf]
        let error = #expect(throws: ConfigurationError.self) { try configuration.validate() }
        #expect(error?.description.contains("not a CA") == true)
    }

    @Test func rootFilesMayHoldSeveralPEMBlocksAndDER() throws {
        let other = try TestAppleSigner()
        let directory = FileManager.default.temporaryDirectory
        let pem = directory.appendingPathComponent("roots-\(UUID().uuidString).pem")
        let der = directory.appendingPathComponent("root-\(UUID().uuidString).cer")
        try Data((signer.root.pem + other.root.pem).utf8).write(to: pem)
        try Data(signer.root.der).write(to: der)
        defer {
            try? FileManager.default.removeItem(at: pem)
            try? FileManager.default.removeItem(at: der)
        }
        let configuration = try AppStoreVerifierConfiguration(environment: [
            "APPLE_IAP_BUNDLE_ID": "b", "APPLE_IAP_ENV": "Sandbox", "APPLE_IAP_ALLOW_TEST_ROOTS": "true",
            "APPLE_IAP_ROOT_CERTS": "\(pem.path), \(der.path)",
        ])
        #expect(configuration.rootCertificates == [signer.root, other.root, signer.root])
    }

    @Test(.enabled(if: AppleVectors.isPresent, AppleVectors.skipComment))
    func applesRootsAreKnownAndNeedNoTestFlag() throws {
        let directory = try #require(AppleVectors.directory).appendingPathComponent("roots")
        let paths = ["AppleRootCA-G3.cer", "AppleRootCA-G2.pem", "AppleIncRootCertificate.cer"].map {
            directory.appendingPathComponent($0).path
        }
        let configuration = try AppStoreVerifierConfiguration(environment: [
            "APPLE_IAP_BUNDLE_ID": "b", "APPLE_IAP_ENV": "Sandbox", "APPLE_IAP_ROOT_CERTS": paths.joined(separator: ","),
        ])
        #expect(configuration.rootCertificates.count == 3 && configuration.testRoots.isEmpty)
        // Apple's intermediate is a CA but not a root Apple publishes.
        let wwdr = #expect(throws: ConfigurationError.self) {
            try AppStoreVerifierConfiguration(environment: [
                "APPLE_IAP_BUNDLE_ID": "b", "APPLE_IAP_ENV": "Sandbox",
                "APPLE_IAP_ROOT_CERTS": directory.appendingPathComponent("AppleWWDRCAG6.cer").path,
            ])
        }
        #expect(wwdr?.problems.map(\.name) == ["APPLE_IAP_ROOT_CERTS"])
    }
}

extension ConfigurationTests {
    static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
}
