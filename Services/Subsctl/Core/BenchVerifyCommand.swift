import AppStore
import Foundation
import ServiceRuntime

/// `subsctl bench verify`: verifications per second of the given payloads on one thread, with
/// the service's verifier and configuration (chain cached after the first of each).
enum BenchVerifyCommand: SubsctlCommand {
    static let path = ["bench", "verify"]
    static let usage = "bench verify --kind \(SignedDataKind.choices) [--expect-env Sandbox|Production] [--seconds N] FILE…"
    static let summary = "Verify the payloads in a loop for N seconds (default 10); the last line is verifications_per_second=<n>."

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let kind: SignedDataKind
        let environment: AppStoreEnvironment?
        do { (kind, environment) = try SignedDataKind.options(&arguments) } catch { return usageError(error.description) }
        let seconds = arguments.option("seconds").map { Double($0) } ?? 10
        guard let seconds, seconds > 0, seconds <= 3600 else { return usageError("--seconds must be a number in (0, 3600]") }
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard !arguments.positionals.isEmpty else { return usageError("give at least one FILE") }

        var tokens: [String] = []
        for path in arguments.positionals {
            do { tokens.append(try SignedInput.read(path)) } catch {
                Subsctl.printError(error.description)
                return ExitStatus.noInput
            }
        }
        guard let verifier = SignedDataVerifier.fromEnvironment() else { return ExitStatus.configuration }
        // Every payload must verify before anything is timed: a benchmark of refusals measures nothing.
        for (index, token) in tokens.enumerated() {
            do throws(VerificationError) { try await verifier.verify(token, as: kind, expecting: environment) } catch {
                Subsctl.printError("\(arguments.positionals[index]) does not verify: \(error.code.rawValue): \(error.reason)")
                return error.isRetryable ? ExitStatus.temporaryFailure : ExitStatus.refused
            }
        }
        let clock = ContinuousClock()
        let start = clock.now
        let deadline = start + .milliseconds(Int64(seconds * 1000))
        var count = 0
        do throws(VerificationError) {
            while clock.now < deadline {
                for token in tokens { try await verifier.verify(token, as: kind, expecting: environment) }
                count += tokens.count
            }
        } catch {
            Subsctl.printError("verification failed during the run: \(error.code.rawValue): \(error.reason)")
            return ExitStatus.refused
        }
        let elapsed = clock.now - start
        let elapsedSeconds = elapsed.inSeconds
        Subsctl.printOutput(
            """
            kind=\(kind.rawValue)
            payloads=\(tokens.count)
            verifications=\(count)
            seconds=\(String(format: "%.3f", elapsedSeconds))
            verifications_per_second=\(Int((Double(count) / elapsedSeconds).rounded()))
            """)
        return ExitStatus.success
    }
}
