import Foundation
import ServiceRuntime

/// What an admin token may do: `viewer` reads, `operator` reads and acts.
public enum AdminRole: String, Sendable, Codable {
    case viewer
    case `operator`
}

/// The admin listener (`ADMIN_HTTP_HOST`, `ADMIN_HTTP_PORT`), who may use it (`ADMIN_TOKENS`) and
/// how long the console's sessions last (`ADMIN_SESSION_*`, `ADMIN_COOKIE_INSECURE`). Without
/// tokens there is no admin listener at all.
public struct AdminSettings: Sendable {
    /// One configured credential; `name` is the operator its actions are audited under.
    public struct Credential: Sendable {
        public var name: String
        public var role: AdminRole
        public var token: String

        public init(name: String, role: AdminRole, token: String) {
            self.name = name
            self.role = role
            self.token = token
        }
    }

    /// Listening address (`ADMIN_HTTP_HOST`). Default 127.0.0.1: support tools stay off the public network.
    public var host: String
    /// Listening port (`ADMIN_HTTP_PORT`). Default 8082; 0 picks a free port.
    public var port: Int
    /// `ADMIN_TOKENS`: `name:role:token,…`; empty: the listener is off.
    public var credentials: [Credential]
    /// A console session closes this long after its sign-in, however busy (`ADMIN_SESSION_HOURS`).
    /// Default 8 hours: a working day, then the token is pasted again.
    public var sessionLifetime: TimeInterval
    /// A console session closes after this long without a request (`ADMIN_SESSION_IDLE_MINUTES`).
    /// Default 30 minutes: a console left open on an unattended screen does not stay usable.
    public var sessionIdleTimeout: TimeInterval
    /// `ADMIN_COOKIE_INSECURE`: the console's cookies lose `Secure`, for a console reached over
    /// plain http on the local machine only (browsers do not send `Secure` cookies over http,
    /// except to localhost). Default false.
    public var cookieInsecure: Bool

    public init(
        host: String = "127.0.0.1", port: Int = 8082, credentials: [Credential] = [], sessionLifetime: TimeInterval = 8 * 3600,
        sessionIdleTimeout: TimeInterval = 30 * 60, cookieInsecure: Bool = false
    ) {
        self.host = host
        self.port = port
        self.credentials = credentials
        self.sessionLifetime = sessionLifetime
        self.sessionIdleTimeout = sessionIdleTimeout
        self.cookieInsecure = cookieInsecure
    }

    public var isEnabled: Bool { !credentials.isEmpty }

    init(reader: ConfigurationReader) {
        host = reader.string("ADMIN_HTTP_HOST", default: "127.0.0.1")
        port = reader.int("ADMIN_HTTP_PORT", default: 8082, range: 0...65_535)
        sessionLifetime = TimeInterval(3600 * reader.int("ADMIN_SESSION_HOURS", default: 8, range: 1...168))
        sessionIdleTimeout = TimeInterval(60 * reader.int("ADMIN_SESSION_IDLE_MINUTES", default: 30, range: 1...1440))
        cookieInsecure = reader.bool("ADMIN_COOKIE_INSECURE", default: false)
        credentials = []
        guard let raw = reader.raw("ADMIN_TOKENS") else { return }
        let expected =
            "name:role:token,… with unique names, role viewer or operator, tokens of at least 32 characters without ',' or ':'"
        for item in raw.split(separator: ",", omittingEmptySubsequences: false) {
            let parts = item.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
            guard parts.count == 3, !parts[0].isEmpty, parts[0].count <= 64, let role = AdminRole(rawValue: parts[1]),
                parts[2].count >= 32
            else {
                // The value is reported redacted (its name holds "token").
                reader.report("ADMIN_TOKENS", raw, expected)
                credentials = []
                return
            }
            credentials.append(Credential(name: parts[0], role: role, token: parts[2]))
        }
        let names = credentials.map(\.name)
        if Set(names).count != names.count {
            reader.report("ADMIN_TOKENS", raw, expected)
            credentials = []
        }
    }
}
