import AppStore
import DemoSigner
import Foundation

/// `subsctl bench sign-notifications`: request bodies for the ingress benchmark, signed ahead of
/// time so the load generator measures the ingress and not the signing.
enum BenchSignNotificationsCommand: SubsctlCommand {
    static let path = ["bench", "sign-notifications"]
    static let usage =
        "bench sign-notifications --signer-dir DIR --count N --out FILE [--product-id ID] [--account-tokens FILE]"
    static let summary = """
        Write N distinct {"signedPayload": …} bodies (one JSON per line): Sandbox DID_RENEW notifications with nested \
        transaction and renewal info, each of its own subscription, signed by the demo signer (local benchmark only; \
        bundle from APPLE_IAP_BUNDLE_ID, default com.example.subscriptions). --product-id names the product (default \
        com.example.monthly); --account-tokens reads appAccountTokens, one UUID per line, and gives them to the \
        transactions in turn, so the notifications belong to those users (default: none, they end UNMATCHED_ACCOUNT).
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
        let productId = arguments.option("product-id") ?? "com.example.monthly"
        var tokens: [UUID] = []
        if let path = arguments.option("account-tokens") {
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return usageError("cannot read \(path)") }
            for line in text.split(whereSeparator: \.isNewline) {
                guard let token = UUID(uuidString: line.trimmingCharacters(in: .whitespaces)) else {
                    return usageError("\(path): \(line.prefix(64)) is not a UUID")
                }
                tokens.append(token)
            }
            guard !tokens.isEmpty else { return usageError("\(path) holds no token") }
        }
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("no positional arguments expected") }

        let signer: TestAppleSigner
        do { signer = try TestAppleSigner(loadingFrom: URL(fileURLWithPath: signerDir)) } catch {
            Subsctl.printError("no demo signer in \(signerDir): \(error)")
            return ExitStatus.configuration
        }
        let bundleId = Subsctl.environment["APPLE_IAP_BUNDLE_ID"] ?? "com.example.subscriptions"
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
                    var first = written
                    for size in sizes {
                        let shape = Shape(bundleId: bundleId, productId: productId, tokens: tokens, first: first)
                        group.addTask { try bodies(size, signer: signer, shape: shape) }
                        first += size
                    }
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

    /// What every body shares; body number `first + i` takes token `(first + i) % tokens.count`.
    struct Shape: Sendable {
        var bundleId: String
        var productId: String
        var tokens: [UUID]
        var first: Int
    }

    /// `size` bodies, newline-terminated. Every one is a new subscription (new notification UUID
    /// and transaction ids), so each is a new row and the routing keys spread over the partitions.
    static func bodies(_ size: Int, signer: TestAppleSigner, shape: Shape) throws -> Data {
        var data = Data()
        let now = Date()
        let bundleId = shape.bundleId
        for index in 0..<size {
            let token = shape.tokens.isEmpty ? nil : shape.tokens[(shape.first + index) % shape.tokens.count]
            let transaction = TestPayloads.transaction(
                bundleId: bundleId, environment: .sandbox, productId: shape.productId, purchaseDate: now, appAccountToken: token)
            let renewal = TestPayloads.renewalInfo(
                environment: .sandbox, productId: shape.productId, originalTransactionId: transaction.originalTransactionId!,
                renewalDate: transaction.expiresDate!)
            let signed = try signer.signNotification(
                type: .didRenew, bundleId: bundleId, environment: .sandbox, transaction: transaction, renewalInfo: renewal)
            // Compact JWS is base64url and dots only: nothing to escape in the JSON string.
            data.append(contentsOf: Array("{\"signedPayload\":\"\(signed)\"}\n".utf8))
        }
        return data
    }
}
