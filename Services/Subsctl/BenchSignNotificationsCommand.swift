import AppStore
import DemoSigner
import Foundation

/// `subsctl bench sign-notifications`: request bodies for the ingress benchmark, signed ahead of
/// time so the load generator measures the ingress and not the signing.
enum BenchSignNotificationsCommand: SubsctlCommand {
    static let path = ["bench", "sign-notifications"]
    static let usage = "bench sign-notifications --signer-dir DIR --count N --out FILE"
    static let summary = """
        Write N distinct {"signedPayload": …} bodies (one JSON per line): Sandbox DID_RENEW notifications with nested \
        transaction and renewal info, each of its own subscription, signed by the demo signer (local benchmark only; \
        bundle from APPLE_IAP_BUNDLE_ID, default com.example.subscriptions).
        """
    /// Bodies signed per task; tasks run on every core.
    static let chunk = 500

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        guard let signerDir = arguments.option("signer-dir") else { return usageError("--signer-dir is required") }
        guard let count = arguments.option("count").flatMap(Int.init), (1...10_000_000).contains(count) else {
            return usageError("--count must be an integer in 1...10000000")
        }
        guard let out = arguments.option("out") else { return usageError("--out is required") }
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("no positional arguments expected") }

        let signer: TestAppleSigner
        do { signer = try TestAppleSigner(loadingFrom: URL(fileURLWithPath: signerDir)) } catch {
            Subsctl.printError("no demo signer in \(signerDir): \(error)")
            return ExitStatus.configuration
        }
        let bundleId = ProcessInfo.processInfo.environment["APPLE_IAP_BUNDLE_ID"] ?? "com.example.subscriptions"
        guard FileManager.default.createFile(atPath: out, contents: nil), let file = FileHandle(forWritingAtPath: out) else {
            Subsctl.printError("cannot write \(out)")
            return ExitStatus.noInput
        }
        defer { try? file.close() }

        let parallelism = max(1, ProcessInfo.processInfo.activeProcessorCount)
        var written = 0
        var bytes = 0
        do {
            while written < count {
                let sizes = (0..<parallelism).map { min(chunk, max(0, count - written - $0 * chunk)) }.filter { $0 > 0 }
                let blocks = try await withThrowingTaskGroup(of: Data.self) { group in
                    for size in sizes { group.addTask { try bodies(size, signer: signer, bundleId: bundleId) } }
                    var blocks: [Data] = []
                    for try await block in group { blocks.append(block) }
                    return blocks
                }
                for block in blocks {
                    try file.write(contentsOf: block)
                    bytes += block.count
                }
                written += sizes.reduce(0, +)
            }
        } catch {
            Subsctl.printError("signing or writing failed: \(error)")
            return ExitStatus.refused
        }
        Subsctl.printOutput("bodies=\(count)\nbytes=\(bytes)\naverage_body_bytes=\(bytes / count)")
        return ExitStatus.success
    }

    /// `size` bodies, newline-terminated. Every one is a new subscription (new notification UUID
    /// and transaction ids), so each is a new row and the routing keys spread over the partitions.
    static func bodies(_ size: Int, signer: TestAppleSigner, bundleId: String) throws -> Data {
        var data = Data()
        let now = Date()
        for _ in 0..<size {
            let transaction = TestPayloads.transaction(bundleId: bundleId, environment: .sandbox, purchaseDate: now)
            let renewal = TestPayloads.renewalInfo(
                environment: .sandbox, originalTransactionId: transaction.originalTransactionId!,
                renewalDate: transaction.expiresDate!)
            let signed = try signer.signNotification(
                type: .didRenew, bundleId: bundleId, environment: .sandbox, transaction: transaction, renewalInfo: renewal)
            // Compact JWS is base64url and dots only: nothing to escape in the JSON string.
            data.append(contentsOf: Array("{\"signedPayload\":\"\(signed)\"}\n".utf8))
        }
        return data
    }
}
