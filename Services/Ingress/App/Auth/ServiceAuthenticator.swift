import Crypto
import Foundation
import HTTPServer
import ServiceRuntime

/// One of the app's own back-end services, from its bearer credential.
struct AuthenticatedService: Sendable, Equatable {
    let name: String
}

/// Verifies service credentials (`SERVICE_TOKENS`) for the service API: metering and the
/// entitlement reads by user id. Only these tokens open it: a user's JWT is not one of them, and a service token is refused by the user endpoints (it
/// is not a JWT: the configuration refuses tokens with a `.`).
///
/// The presented token is compared with every configured one, each through its SHA-256 digest and
/// `constantTimeEquals`, so neither where a token differs nor how long it is shows in the timing.
struct ServiceAuthenticator: Sendable {
    private let credentials: [(name: String, digest: [UInt8])]

    init(settings: ServiceTokenSettings) {
        credentials = settings.tokens.map { ($0.name, SHA256.hash(Array($0.token.utf8))) }
    }

    func authenticate(_ request: HTTPRequest) throws(HTTPError) -> AuthenticatedService {
        // On bytes: Foundation's trimming cost as much as the rest of the check.
        guard let header = request.header("authorization")?.utf8, header.count > 7,
            zip(header.prefix(7), "bearer ".utf8).allSatisfy({ ($0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0) == $1 })
        else { throw APIError.unauthorized("a service bearer token is required") }
        let blank: (UInt8) -> Bool = { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }
        let token = header.dropFirst(7).drop(while: blank)
        let presented = SHA256.hash(Array(token.prefix(token.count - token.reversed().prefix(while: blank).count)))
        var match: String?
        for credential in credentials where constantTimeEquals(credential.digest, presented) && match == nil {
            match = credential.name
        }
        guard let match else { throw APIError.unauthorized("not a service token") }
        return AuthenticatedService(name: match)
    }
}

/// `SERVICE_TOKENS`: `name:token,…`, the back-end services allowed to meter credits and read any
/// user's entitlements. Names are
/// unique; tokens are at least 32 characters without `.` or `,` (never mistaken for a JWT).
/// Unset: the service API refuses every call.
public struct ServiceTokenSettings: Sendable {
    public var tokens: [(name: String, token: String)]

    public init(tokens: [(name: String, token: String)] = []) { self.tokens = tokens }

    init(reader: ConfigurationReader) {
        let expected = "name:token,… with unique names and tokens of at least 32 characters without '.'"
        // The value is reported redacted (its name holds "token").
        guard let pairs = reader.pairs("SERVICE_TOKENS", expected: expected) else {
            tokens = []
            return
        }
        tokens = pairs.map { (name: $0.0, token: $0.1) }
        let names = tokens.map(\.name)
        if Set(names).count != names.count || tokens.contains(where: { $0.token.count < 32 || $0.token.contains(".") }) {
            reader.report("SERVICE_TOKENS", reader.raw("SERVICE_TOKENS"), expected)
        }
    }
}
