import Domain
import Foundation
import Postgres
import Storage
import TestSupport
import Testing

/// Promotional grants on a real PostgreSQL: each step with its audit row and its event, once;
/// the entitlements read from chains, the catalogue and grants at a given instant.
@Suite struct EntitlementStoreTests {
    static let bundleID = "com.example.subscriptions"

    static func events(_ pool: PostgresPool) async throws -> [(type: String, key: String, user: String)] {
        try await pool.query("SELECT type, event_key, user_id FROM outbound_event ORDER BY seq").map {
            (try $0.decode("type"), try $0.decode("event_key"), try $0.decode("user_id"))
        }
    }

    static func audit(_ pool: PostgresPool) async throws -> [String] {
        try await pool.query("SELECT action FROM audit_log WHERE action LIKE 'ENTITLEMENT_%' ORDER BY id").map { try $0.decode("action") }
    }

    @Test func grantRevokeAndTheirTrail() async throws {
        try await withTestDatabase("entitlements") { database in
            let pool = database.pool
            let rows = TestRows(pool: pool, bundleID: Self.bundleID)
            try await rows.applyDemoCatalogue()
            try await rows.addUser("u1")
            let store = EntitlementStore(pool: pool)
            let now = wholeSeconds(0)
            await #expect(throws: EntitlementGrantError.unknownUser("nobody")) {
                try await store.grant(
                    userID: "nobody", entitlement: "pro", expiresAt: now + 60, environment: "Sandbox", operator: "ops", reason: "r",
                    now: now)
            }
            await #expect(throws: EntitlementGrantError.notInFuture) {
                try await store.grant(
                    userID: "u1", entitlement: "pro", expiresAt: now, environment: "Sandbox", operator: "ops", reason: "r", now: now)
            }
            #expect(try await store.entitlements(userID: "u1", now: now).isEmpty)
            let grant = try await store.grant(
                userID: "u1", entitlement: "pro", expiresAt: now + 7 * 86_400, environment: "Sandbox", operator: "ops",
                reason: "apology for the outage", now: now)
            #expect(grant.userID == "u1" && grant.startsAt == now && grant.grantedBy == "ops" && grant.isInForce(at: now))
            let items = try await store.entitlements(userID: "u1", now: now)
            #expect(items.map(\.entitlement) == ["pro"] && items.map(\.source) == [.promotional] && items.map(\.active) == [true])
            // A chain with service now wins; the grant's end is named beside it.
            try await rows.addSubscription(
                user: "u1", product: TestRows.pro, status: "ACTIVE", expiresAt: now + 30 * 86_400, originalTransactionID: "2000000001")
            let both = try await store.entitlements(userID: "u1", now: now)
            #expect(both.map(\.source) == [.apple] && both.first?.originalTransactionID == "2000000001")
            #expect(both.first?.promotionalExpiresAt == now + 7 * 86_400)
            // The stored ACTIVE row is judged at the instant: past its expiry it no longer serves.
            let later = try await store.entitlements(userID: "u1", now: now + 31 * 86_400)
            #expect(later.map(\.active) == [false] && later.first?.status == .expired)

            let revoked = try await store.revoke(userID: "u1", entitlement: "pro", operator: "ops2", reason: "mistake", now: now + 60)
            #expect(revoked.map(\.grantID) == [grant.grantID] && revoked.first?.revokedBy == "ops2")
            #expect(try await store.grants(userID: "u1").first?.isInForce(at: now + 120) == false)
            await #expect(throws: EntitlementGrantError.nothingInForce(userID: "u1", entitlement: "pro")) {
                try await store.revoke(userID: "u1", entitlement: "pro", operator: "ops2", reason: "again", now: now + 120)
            }
            #expect(try await Self.audit(pool) == ["ENTITLEMENT_GRANTED", "ENTITLEMENT_REVOKED"])
            let events = try await Self.events(pool)
            #expect(events.map(\.type) == ["entitlement.granted", "entitlement.revoked"])
            #expect(events.map(\.key) == ["entitlement.granted:grant:\(grant.grantID)", "entitlement.revoked:grant:\(grant.grantID)"])
            let data: String = try await pool.query("SELECT data::text AS d FROM outbound_event ORDER BY seq LIMIT 1")[0].decode("d")
            let object = try #require(try JSONSerialization.jsonObject(with: Data(data.utf8)) as? [String: Any])
            #expect(object["entitlement"] as? String == "pro" && object["source"] as? String == "PROMOTIONAL")
            #expect(object["expiresAt"] as? String == OutboundEvent.timestamp(now + 7 * 86_400))
        }
    }

    /// The clock's end: every grant past its expiry ends once, with one event, however many
    /// workers run it at the same time; revoked and running grants are left alone.
    @Test func expireDueEndsEachGrantOnce() async throws {
        try await withTestDatabase("entitlements") { database in
            let pool = database.pool
            let rows = TestRows(pool: pool, bundleID: Self.bundleID)
            let store = EntitlementStore(pool: pool)
            let start = wholeSeconds(-3600)
            for user in (1...30).map({ "u\($0)" }) {
                try await rows.addUser(user)
                try await store.grant(
                    userID: user, entitlement: "beta", expiresAt: start + 60, environment: "Production", operator: "ops", reason: "r",
                    now: start)
            }
            try await store.grant(
                userID: "u1", entitlement: "pro", expiresAt: start + 7200, environment: "Production", operator: "ops", reason: "r",
                now: start)
            try await store.grant(
                userID: "u2", entitlement: "gold", expiresAt: start + 90, environment: "Production", operator: "ops", reason: "r",
                now: start)
            try await store.revoke(userID: "u2", entitlement: "gold", operator: "ops", reason: "r", now: start + 30)
            #expect(try await store.expireDue(now: start + 59, limit: 100) == 0)
            let now = start + 120
            let counts = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<3 { group.addTask { try await store.expireDue(now: now, limit: 7) } }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            var total = counts.reduce(0, +)
            while true {
                let more = try await store.expireDue(now: now, limit: 7)
                if more == 0 { break }
                total += more
            }
            #expect(total == 30)
            let expired = try await Self.events(pool).filter { $0.type == "entitlement.expired" }
            #expect(expired.count == 30 && Set(expired.map(\.key)).count == 30)
            #expect(try await store.grants(userID: "u1").map { $0.endedAt != nil } == [true, false])
            #expect(try await store.grants(userID: "u2").map { $0.endedAt != nil } == [true, false])
            let occurred: Date = try await pool.query(
                "SELECT min(occurred_at) AS o FROM outbound_event WHERE type = 'entitlement.expired'")[0].decode("o")
            #expect(occurred == start + 60, "dated at the grant's end")
            let u1 = try await store.entitlements(userID: "u1", now: now)
            #expect(u1.map(\.entitlement) == ["beta", "pro"] && u1.map(\.active) == [false, true])
        }
    }
}
