import Crypto
import DemoSigner
import Foundation

/// `subsctl demo-signer init`: the simulated Apple of the local demo, kept in a directory so the
/// services started with its root and the demo signing later agree across runs.
enum DemoSignerCommand: SubsctlCommand {
    static let path = ["demo-signer", "init"]
    static let usage = "demo-signer init --dir DIR"
    static let summary = """
        Create the demo's simulated Apple signer in DIR (0700) unless it exists; print its root certificate path. \
        Local demo only: this signer is trusted only with APPLE_IAP_ALLOW_TEST_ROOTS=true.
        """

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        guard let dir = arguments.option("dir"), !dir.isEmpty else { return usageError("--dir is required") }
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("no positional arguments expected") }

        let directory = URL(fileURLWithPath: dir)
        do {
            _ = try loadOrCreate(directory)
        } catch {
            Subsctl.printError("demo signer in \(dir): \(error)")
            return ExitStatus.configuration
        }
        Subsctl.printOutput(TestAppleSigner.rootCertificatePath(in: directory))
        return ExitStatus.success
    }

    /// The signer saved in `directory`, created on first use. A leaf that expired (or is about to)
    /// is reissued under the same root, so services already trusting that root keep working.
    static func loadOrCreate(_ directory: URL, now: Date = Date()) throws -> TestAppleSigner {
        guard TestAppleSigner.isSaved(in: directory) else {
            let signer = try TestAppleSigner(now: now)
            try signer.save(to: directory)
            return signer
        }
        let signer = try TestAppleSigner(loadingFrom: directory)
        guard signer.leaf.notAfter < now + 86_400 || signer.intermediate.notAfter < now + 86_400 else { return signer }
        let renewed = try signer.variant(TestAppleSigner.Options(), now: now)
        try renewed.save(to: directory)
        return renewed
    }
}
