import Foundation
import Postgres

/// The SQL of `console_session`: the support console's sign-ins, found by the SHA-256 digest of
/// the session id in the browser's cookie (the id itself is never stored).
public struct ConsoleSessionStore: Sendable {
    /// A session still open: which credential signed in (its digest) and its forms' CSRF token.
    public struct Session: Sendable, Equatable {
        public let credentialDigest: [UInt8]
        public let csrf: String

        public init(credentialDigest: [UInt8], csrf: String) {
            self.credentialDigest = credentialDigest
            self.csrf = csrf
        }
    }

    /// How long a session stays open: from its sign-in whatever happens, and from its last request.
    public struct Lifetime: Sendable, Equatable {
        public var absolute: TimeInterval
        public var idle: TimeInterval

        public init(absolute: TimeInterval, idle: TimeInterval) {
            self.absolute = absolute
            self.idle = idle
        }
    }

    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Records a sign-in. The sessions either limit has closed by `now` go in the same statement:
    /// sign-ins are rare and the table stays as small as the sessions still open.
    public func create(idDigest: [UInt8], credentialDigest: [UInt8], csrf: String, now: Date, lifetime: Lifetime) async throws {
        try await pool.query(
            """
            WITH closed AS (
                DELETE FROM console_session
                 WHERE created_at <= \(now - lifetime.absolute) OR last_seen_at <= \(now - lifetime.idle)
            )
            INSERT INTO console_session (id_digest, credential_digest, csrf_token, created_at, last_seen_at)
            VALUES (\(idDigest), \(credentialDigest), \(csrf), \(now), \(now))
            """)
    }

    /// The session of `idDigest` when neither limit has closed it by `now`, its last request then
    /// moved to `now`; nil otherwise. One statement per console request: the console's traffic is
    /// a few people's clicks, so the write each request costs does not matter.
    public func open(idDigest: [UInt8], now: Date, lifetime: Lifetime) async throws -> Session? {
        // GREATEST: instances whose clocks differ a little never move the last request backwards.
        try await pool.query(
            """
            UPDATE console_session SET last_seen_at = GREATEST(last_seen_at, \(now))
             WHERE id_digest = \(idDigest)
               AND created_at > \(now - lifetime.absolute) AND last_seen_at > \(now - lifetime.idle)
            RETURNING credential_digest, csrf_token
            """
        ).first.map { Session(credentialDigest: try $0.decode("credential_digest"), csrf: try $0.decode("csrf_token")) }
    }

    /// Ends a session (sign-out); an unknown or already ended one is no error.
    public func delete(idDigest: [UInt8]) async throws {
        try await pool.query("DELETE FROM console_session WHERE id_digest = \(idDigest)")
    }
}
