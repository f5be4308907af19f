import Crypto
import Foundation

/// `subsctl dev-token`: a client bearer token for local use, signed like the ingress expects
/// with `USER_TOKEN_HS256_SECRET` (production tokens come from the identity provider).
enum DevTokenCommand: SubsctlCommand {
    static let path = ["dev-token"]
    static let usage = "dev-token --user-id ID [--ttl SECONDS]"
    static let summary =
        "Print an HS256 bearer token (sub = ID, exp = now + SECONDS, default 3600) signed with USER_TOKEN_HS256_SECRET; local use only."

    static let maxTTL = 366 * 86_400

    static func run(_ arguments: ParsedArguments) async -> Int32 {
        var arguments = arguments
        let user = arguments.userID()
        let ttlText = arguments.option("ttl")
        do { try arguments.checkAllOptionsUsed() } catch { return usageError(error.description) }
        guard arguments.positionals.isEmpty else { return usageError("unexpected argument \(arguments.positionals[0])") }
        // The ingress accepts subjects of 1 to 128 characters.
        guard let user, !user.isEmpty, user.count <= 128 else { return usageError("--user-id must be a user id of 1 to 128 characters") }
        let ttl = ttlText.map { Int($0) } ?? 3600
        guard let ttl, (1...maxTTL).contains(ttl) else { return usageError("--ttl must be a whole number of seconds from 1 to \(maxTTL)") }
        // The same key bytes the ingress uses: the secret's UTF-8 text.
        guard let secret = Subsctl.environment["USER_TOKEN_HS256_SECRET"], secret.utf8.count >= 32 else {
            Subsctl.printError("USER_TOKEN_HS256_SECRET must be set to the ingress's secret (at least 32 bytes)")
            return ExitStatus.configuration
        }
        Subsctl.printOutput(token(user: user, secret: secret, ttl: ttl))
        return ExitStatus.success
    }

    /// The token itself (also minted by `subsctl demo` for its user).
    static func token(user: String, secret: String, ttl: Int, now: Date = Date()) -> String {
        let issued = Int(now.timeIntervalSince1970)
        let claims: [String: Any] = ["sub": user, "iat": issued, "exp": issued + ttl]
        // A string and two integers always serialise.
        let payload = try! JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys, .withoutEscapingSlashes])
        let signingInput = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8)) + "." + Base64URL.encode(Array(payload))
        let signature = HMACSHA256.authenticate(key: Array(secret.utf8), message: Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }
}
