import AppStore
import Crypto
import Foundation

/// `subsctl verify`: verifies one piece of signed App Store data with the service's own
/// verifier and configuration, and prints what it says.
enum VerifyCommand: SubsctlCommand {
    static let path = ["verify"]
    static let usage = "verify --kind \(SignedDataKind.choices) [--expect-env Sandbox|Production] [--json] FILE|-"
    static let summary =
        "Verify a JWS or {\"signedPayload\": …} body; print its decoded (and nested decoded) JSON, or the error code and reason."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let kind: SignedDataKind
        let environment: AppStoreEnvironment?
        do { (kind, environment) = try SignedDataKind.options(&arguments) } catch { return usageError(error.description) }
        // Taken like every read command's, though the answer is JSON either way.
        _ = arguments.flag("json")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.count == 1 else { return usageError("give exactly one FILE (or - for stdin)") }

        let token: String
        do { token = try SignedInput.read(arguments.positionals[0]) } catch {
            Subsctl.printError(error.description)
            return ExitStatus.noInput
        }
        guard let verifier = SignedDataVerifier.fromEnvironment() else { return ExitStatus.configuration }

        do throws(VerificationError) {
            var output: [String: Any] = ["kind": kind.rawValue]
            switch kind {
            case .notification:
                let notification = try await verifier.verifyNotification(token, expectedEnvironment: environment)
                output["payload"] = try decodedPayload(token)
                // Nested data is Apple-signed on its own: verified with the same rules and environment.
                let nestedEnvironment = environment ?? notification.data?.environment
                if let nested = notification.data?.signedTransactionInfo {
                    _ = try await verifier.verifyTransaction(nested, expectedEnvironment: nestedEnvironment)
                    output["signedTransactionInfo"] = try decodedPayload(nested)
                }
                if let nested = notification.data?.signedRenewalInfo {
                    _ = try await verifier.verifyRenewalInfo(nested, expectedEnvironment: nestedEnvironment)
                    output["signedRenewalInfo"] = try decodedPayload(nested)
                }
            case .transaction, .renewal, .appTransaction:
                try await verifier.verify(token, as: kind, expecting: environment)
                output["payload"] = try decodedPayload(token)
            }
            let data = try? JSONSerialization.data(withJSONObject: output, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
            Subsctl.printOutput(String(decoding: data ?? Data(), as: UTF8.self))
            return ExitStatus.success
        } catch {
            Invocation.current.writeError("\(error.code.rawValue): \(error.reason)\n")
            return error.isRetryable ? ExitStatus.temporaryFailure : ExitStatus.refused
        }
    }

    /// The payload segment of a token the verifier accepted, as a JSON object with Apple's
    /// exact fields (unknown ones included).
    private static func decodedPayload(_ token: String) throws(VerificationError) -> Any {
        guard let object = JWSParts(token)?.payloadJSON else { throw VerificationError(.malformed, "the verified payload does not re-read as JSON") }
        return object
    }
}
