import Domain
import Foundation
import Postgres
import ServiceRuntime
import Storage
import TestSupport
import Testing

@testable import FulfillmentApp

/// The worker's clock for promotional grants: a pass ends what expired, each once with its
/// event, and the running service does it by itself within seconds.
@Suite(.timeLimit(.minutes(2)))
struct PromotionalGrantExpiryTests {
    @Test func grantsEndAtTheirExpiryWithTheirEvent() async throws {
        try await withTestDatabase("grants") { database in
            let store = EntitlementStore(pool: database.pool)
            try await TestRows(pool: database.pool, bundleID: "com.example.subscriptions").addUser("u1")
            let start = wholeSeconds(-600)
            try await store.grant(
                userID: "u1", entitlement: "beta", expiresAt: start + 60, environment: "Sandbox", operator: "ops", reason: "r", now: start)
            try await store.grant(
                userID: "u1", entitlement: "pro", expiresAt: wholeSeconds(3600), environment: "Sandbox", operator: "ops", reason: "r",
                now: start)
            let expiry = PromotionalGrantExpiry(
                store: store, clock: SystemClock(), logger: Logger(label: "test", level: .critical, sink: LogSink.memory()))
            let service = Task { try await expiry.run() }
            let ended = await eventually(timeout: 30, every: .milliseconds(100)) {
                (try? await database.count("SELECT count(*) FROM outbound_event WHERE type = 'entitlement.expired'")) == 1
            }
            await expiry.shutdown()
            try await service.value
            #expect(ended, "the running service ended the expired grant")
            #expect(try await store.grants(userID: "u1").map { $0.endedAt != nil } == [true, false])
            #expect(try await store.expireDue(now: Date(), limit: 10) == 0, "each grant ends once")
        }
    }
}
