import Crypto
import Foundation
import ServiceRuntime

/// Everything `SignedDataVerifier` needs: which app and environment to accept and which roots
/// to trust. Read from the `APPLE_IAP_*` environment variables or built directly (tests).
public struct AppStoreVerifierConfiguration: Sendable {
    /// `APPLE_IAP_BUNDLE_ID`: the app's bundle identifier. Required.
    public var bundleId: String
    /// `APPLE_IAP_APPLE_ID`: the app's Apple ID; required when `environment` is Production
    /// (Sandbox data carries none).
    public var appAppleId: Int64?
    /// `APPLE_IAP_ENV`: Sandbox, Production, Xcode or LocalTesting. Required. A Production
    /// deployment also accepts Sandbox data when the caller expects it (its sandbox endpoint).
    public var environment: AppStoreEnvironment
    /// `APPLE_IAP_ROOT_CERTS`: comma-separated paths of DER or PEM files. The only trust anchors.
    public var rootCertificates: [X509Certificate]
    /// `APPLE_IAP_ALLOW_TEST_ROOTS`: accept roots that are not Apple's (tests, demo). Default false.
    public var allowTestRoots: Bool
    /// `APPLE_IAP_ONLINE_CHECKS`: check certificates at the current time plus OCSP (Apple's
    /// responders must be reachable). Default false, which checks them at the payload's
    /// signedDate as Apple's libraries do offline.
    public var onlineChecks: Bool
    /// `APPLE_IAP_ALLOW_XCODE`: accept locally signed Xcode / LocalTesting data, for local StoreKit
    /// testing only; never together with Production. Default false.
    public var allowXcode: Bool

    public init(
        bundleId: String, appAppleId: Int64? = nil, environment: AppStoreEnvironment, rootCertificates: [X509Certificate],
        allowTestRoots: Bool = false, onlineChecks: Bool = false, allowXcode: Bool = false
    ) {
        self.bundleId = bundleId
        self.appAppleId = appAppleId
        self.environment = environment
        self.rootCertificates = rootCertificates
        self.allowTestRoots = allowTestRoots
        self.onlineChecks = onlineChecks
        self.allowXcode = allowXcode
    }

    /// Reads and validates the `APPLE_IAP_*` variables, reporting every problem at once.
    public init(environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigurationError) {
        let reader = ConfigurationReader(environment: environment)
        self = Self.read(from: reader)
        try reader.validate()
    }

    /// Reads the `APPLE_IAP_*` variables into `reader`, so a service can collect these problems
    /// with its other settings; the result is only meaningful if `reader.validate()` passes.
    public static func read(from reader: ConfigurationReader) -> AppStoreVerifierConfiguration {
        let bundleId = reader.requiredString("APPLE_IAP_BUNDLE_ID", expected: "the app's bundle identifier")
        var appAppleId: Int64?
        if let raw = reader.optionalString("APPLE_IAP_APPLE_ID") {
            appAppleId = Int64(raw.trimmingCharacters(in: .whitespaces)).flatMap { $0 > 0 ? $0 : nil }
            if appAppleId == nil { reader.report("APPLE_IAP_APPLE_ID", raw, "a positive integer (the app's Apple ID)") }
        }
        let names = AppStoreEnvironment.allCases.map(\.rawValue)
        var environment = AppStoreEnvironment.sandbox
        if let raw = reader.optionalString("APPLE_IAP_ENV") {
            let match = names.first { $0.lowercased() == raw.lowercased() }
            if let match {
                environment = AppStoreEnvironment(rawValue: match)!
            } else {
                reader.report("APPLE_IAP_ENV", raw, "one of " + names.joined(separator: ", "))
            }
        } else {
            reader.report("APPLE_IAP_ENV", nil, "one of " + names.joined(separator: ", "))
        }
        var roots: [X509Certificate] = []
        var rootsUnreadable = false
        if let raw = reader.optionalString("APPLE_IAP_ROOT_CERTS") {
            for path in raw.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !path.isEmpty {
                do throws(CryptoError) { roots += try X509Certificate.loadAll(path: path) } catch {
                    rootsUnreadable = true
                    reader.report("APPLE_IAP_ROOT_CERTS", path, "readable DER or PEM certificate files (\(error.reason))")
                }
            }
        } else {
            reader.report("APPLE_IAP_ROOT_CERTS", nil, "comma-separated paths of Apple root certificates (DER or PEM)")
        }
        let configuration = AppStoreVerifierConfiguration(
            bundleId: bundleId, appAppleId: appAppleId, environment: environment, rootCertificates: roots,
            allowTestRoots: reader.bool("APPLE_IAP_ALLOW_TEST_ROOTS", default: false),
            onlineChecks: reader.bool("APPLE_IAP_ONLINE_CHECKS", default: false),
            allowXcode: reader.bool("APPLE_IAP_ALLOW_XCODE", default: false))
        // A missing or unreadable setting is already reported; do not add "no roots" on top.
        let rootsRead = reader.optionalString("APPLE_IAP_ROOT_CERTS") != nil && !rootsUnreadable
        configuration.reportInconsistencies(to: reader, requireRoots: rootsRead)
        return configuration
    }

    /// Refuses combinations that must not start (also checked by `SignedDataVerifier.init`).
    public func validate() throws(ConfigurationError) {
        let reader = ConfigurationReader(environment: [:])
        reportInconsistencies(to: reader, requireRoots: true)
        try reader.validate()
    }

    private func reportInconsistencies(to reader: ConfigurationReader, requireRoots: Bool) {
        if environment == .production && appAppleId == nil {
            reader.report("APPLE_IAP_APPLE_ID", nil, "the app's Apple ID: Production data is checked against it")
        }
        if environment == .production && allowXcode {
            reader.report("APPLE_IAP_ALLOW_XCODE", "true", "false with APPLE_IAP_ENV=Production (Xcode data is for local testing)")
        }
        if environment.isLocal && !allowXcode {
            reader.report("APPLE_IAP_ALLOW_XCODE", allowXcode ? "true" : nil, "true with APPLE_IAP_ENV=\(environment.rawValue)")
        }
        if requireRoots && rootCertificates.isEmpty {
            reader.report("APPLE_IAP_ROOT_CERTS", nil, "at least one root certificate")
        }
        for root in rootCertificates {
            let fingerprint = Hex.encode(root.sha256Fingerprint)
            if !root.isCA {
                reader.report("APPLE_IAP_ROOT_CERTS", fingerprint, "CA certificates only (\(root.subject) is not a CA)")
            } else if Self.appleRootFingerprints[fingerprint] == nil && !allowTestRoots {
                reader.report(
                    "APPLE_IAP_ROOT_CERTS", fingerprint,
                    "Apple root certificates only (\(root.subject) is not one); set APPLE_IAP_ALLOW_TEST_ROOTS=true for test roots")
            }
        }
    }

    /// Configured roots that are not Apple's (only possible with `allowTestRoots`).
    public var testRoots: [X509Certificate] {
        rootCertificates.filter { Self.appleRootFingerprints[Hex.encode($0.sha256Fingerprint)] == nil }
    }

    /// SHA-256 fingerprints (lowercase hex) of the roots Apple publishes at
    /// https://www.apple.com/certificateauthority/, by name.
    public static let appleRootFingerprints: [String: String] = [
        "63343abfb89a6a03ebb57e9b3f5fa7be7c4f5c756f3017b3a8c488c3653e9179": "Apple Root CA - G3",
        "c2b9b042dd57830e7d117dac55ac8ae19407d38e41d88f3215bc3a890444a050": "Apple Root CA - G2",
        "b0b1730ecbc7ff4505142c49f1295e6eda6bcaed7e2c68c5be91b5a11001f024": "Apple Root CA",
    ]
}
