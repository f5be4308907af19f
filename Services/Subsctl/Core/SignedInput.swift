import AppStore
import Foundation
import ServiceRuntime

/// The kinds of App Store signed data `subsctl` verifies, by their command-line names.
enum SignedDataKind: String, CaseIterable {
    case notification
    case transaction
    case renewal
    case appTransaction = "app-transaction"

    static let choices = allCases.map(\.rawValue).joined(separator: "|")

    /// `--kind` and the optional `--expect-env`, which every verify command takes; the error is
    /// the usage message.
    static func options(_ arguments: inout ParsedArguments) throws(UsageProblem)
        -> (kind: SignedDataKind, environment: AppStoreEnvironment?)
    {
        guard let kind = arguments.option("kind").flatMap(SignedDataKind.init(rawValue:)) else {
            throw UsageProblem(description: "--kind must be one of \(choices)")
        }
        guard let raw = arguments.option("expect-env") else { return (kind, nil) }
        guard let environment = AppStoreEnvironment(argument: raw) else {
            throw UsageProblem(description: "--expect-env must be Sandbox or Production")
        }
        return (kind, environment)
    }

    /// A command line a verify command cannot run with.
    struct UsageProblem: Error, CustomStringConvertible {
        let description: String
    }
}

/// Reads signed data from a file or stdin (`-`): a raw compact JWS or a notification request
/// body `{"signedPayload": "…"}`, surrounding whitespace ignored.
enum SignedInput {
    struct ReadError: Error, CustomStringConvertible {
        let description: String
    }

    static func read(_ path: String) throws(ReadError) -> String {
        let data: Data?
        if path == "-" {
            data = Invocation.current.readInput()
        } else {
            data = FileManager.default.contents(atPath: path)
        }
        guard let data else { throw ReadError(description: "cannot read \(path)") }
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard text.hasPrefix("{") else { return text }
        guard let body = try? JSONDecoder().decode(ResponseBodyV2.self, from: Data(text.utf8)), let payload = body.signedPayload else {
            throw ReadError(description: "\(path) is JSON but not a {\"signedPayload\": \"…\"} body")
        }
        return payload
    }
}

extension AppStoreEnvironment {
    /// Sandbox or Production, as `--expect-env` takes it (case-insensitive).
    init?(argument: String) {
        guard let match = [AppStoreEnvironment.sandbox, .production].first(where: { $0.rawValue.lowercased() == argument.lowercased() })
        else { return nil }
        self = match
    }
}

extension SignedDataVerifier {
    /// Verifies `token` as `kind`, returning nothing: for the benchmark, where only cost counts.
    func verify(_ token: String, as kind: SignedDataKind, expecting environment: AppStoreEnvironment?) async throws(VerificationError) {
        switch kind {
        case .notification: _ = try await verifyNotification(token, expectedEnvironment: environment)
        case .transaction: _ = try await verifyTransaction(token, expectedEnvironment: environment)
        case .renewal: _ = try await verifyRenewalInfo(token, expectedEnvironment: environment)
        case .appTransaction: _ = try await verifyAppTransaction(token, expectedEnvironment: environment)
        }
    }

    /// A verifier from the `APPLE_IAP_*` variables, or nil after printing why the configuration
    /// was refused (callers then exit with `ExitStatus.configuration`).
    static func fromEnvironment() -> SignedDataVerifier? {
        do {
            let configuration = try AppStoreVerifierConfiguration(environment: Subsctl.environment)
            return try SignedDataVerifier(configuration: configuration, logger: Subsctl.logger.with(["component": "verifier"]))
        } catch {
            Subsctl.printError("configuration refused:\n\(error.description)")
            return nil
        }
    }
}
