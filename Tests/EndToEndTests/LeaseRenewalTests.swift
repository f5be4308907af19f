import AppStore
import AppStoreTestSupport
import Foundation
import FulfillmentApp
import Postgres
import TestSupport
import Testing

/// Issue 26: a worker renews the leases of the events it works on, so a short lease is safe for
/// long work and a dead worker's claimed events come back within seconds.
@Suite(.serialized, .timeLimit(.minutes(4)))
struct LeaseRenewalTests {
    static func id() -> String { String(UInt64.random(in: 6_000_000_000_000_000...6_999_999_999_999_999)) }

    /// Apple takes three leases' time to answer a consumption request: the worker that claimed the
    /// event keeps its lease all along, so neither the sweeper nor the other worker takes it, and
    /// Apple is asked once. (Without renewal the lease ran out after 3 s, the sweeper re-published
    /// the event and the other worker answered Apple a second time.)
    @Test func aLeaseRenewedDuringLongWorkIsNotStolen() async throws {
        let harness = try await SchedulerHarness.start(workers: 2)
        defer { harness.stop() }
        let pair = harness.pair
        let lease = 3.0  // PipelineHarness's FULFILLMENT_LEASE_SECONDS
        let token = try await pair.user("alice")
        let purchase = pair.transaction(Self.id(), token: token)
        try harness.mock.addTransaction(purchase)
        #expect(try await pair.outcome(of: try await pair.notify(.subscribed, .initialBuy, transaction: purchase)) == .succeeded)
        let consent = try await pair.client.send(
            "PUT", "/api/v1/subscriptions/consumption-consent", json: ["consumptionData": "GRANTED"],
            headers: ["Authorization": "Bearer \(pair.ingress.userToken("alice"))"])
        #expect(consent.status == 200, "\(consent.text)")

        let path = "/inApps/v2/transactions/consumption/"
        harness.mock.enqueue(.init(status: 202, delay: .seconds(lease * 3), pathPrefix: path))
        let uuid = try await pair.notify(.consumptionRequest, transaction: purchase)
        let event = "SELECT %@ FROM inbound_event WHERE kind = 'notification' AND notification_uuid = '\(uuid)'"
        func value<T: PostgresDecodable>(_ column: String, as type: T.Type) async throws -> T? {
            try await pair.value(PostgresQuery(unsafeSQL: event.replacingOccurrences(of: "%@", with: column)), as: type)
        }
        let claimed = try await eventually(timeout: 30, every: .milliseconds(50)) {
            try await value("process_status", as: String.self) == "PROCESSING"
        }
        #expect(claimed)
        let owner = try #require(try await value("lease_owner", as: String.self))
        // Sampled while Apple holds the answer back, well past the lease the claim took.
        var expiredSeen = false
        var owners: Set<String> = [owner]
        while try await value("process_status", as: String.self) == "PROCESSING" {
            if let current = try await value("lease_owner", as: String.self) { owners.insert(current) }
            if try await value("lease_expires_at < now()", as: Bool.self) == true { expiredSeen = true }
            try await Task.sleep(for: .milliseconds(200))
        }
        #expect(try await pair.outcome(of: uuid, timeout: 60) == .succeeded)
        #expect(!expiredSeen, "the lease ran out while its owner was working")
        #expect(owners == [owner], "the lease changed hands: \(owners)")
        #expect(try await value("retry_count", as: Int.self) == 0)
        #expect(try await value("republished_at IS NULL", as: Bool.self) == true, "the sweeper took the event for stuck")
        let completedBy = try await pair.value(
            """
            SELECT p.worker_id FROM processed_event p JOIN inbound_event e ON e.kind = p.event_kind AND e.id = p.event_id
             WHERE e.notification_uuid = \(uuid)
            """, as: String.self)
        #expect(completedBy == owner)
        let puts = harness.mock.requests.filter { $0.method == "PUT" && $0.path.hasPrefix(path) }.count
        #expect(puts == 1, "Apple was asked \(puts) times")
        let renewals = try await pair.metric("subs_fulfillment_lease_renewals_total", worker: owner == "worker-0" ? 0 : 1)
        #expect(renewals >= 2, "\(renewals) renewals")
        try await pair.checkInvariants()
    }

    /// A worker killed right after its claim, with the shipped lease: the event comes back once
    /// the lease runs out and another worker applies it, once.
    @Test func aDeadWorkersClaimedEventIsAppliedAgainAfterTheShortLease() async throws {
        let pair = try await WorkerHarness.start(workers: 0)
        defer { pair.stop() }
        let marker = FileManager.default.temporaryDirectory.appendingPathComponent(TestEnvironment.uniqueName("claimed"))
        defer { try? FileManager.default.removeItem(at: marker) }
        var shipped = pair.ingress.environment
        shipped.removeValue(forKey: "FULFILLMENT_LEASE_SECONDS")
        let crashing = try await WorkerHarness.launchWorker(
            shipped.merging(["FULFILLMENT_CRASH_POINT": "claimed", "FULFILLMENT_CRASH_MARKER": marker.path]) { _, new in new },
            name: "dies-after-claim")
        defer { crashing.kill() }

        let token = try await pair.user("bob")
        let id = Self.id()
        let uuid = try await pair.notify(
            .subscribed, .initialBuy, transaction: pair.transaction(id, token: token), renewal: pair.renewalInfo(original: id))
        #expect(await crashing.waitForExit(timeout: 60) == SIGKILL, "\(crashing.output.suffix(2000))")
        let lease = try await pair.value(
            """
            SELECT extract(epoch FROM lease_expires_at - updated_at)::int FROM inbound_event
             WHERE kind = 'notification' AND notification_uuid = \(uuid) AND lease_owner = 'dies-after-claim'
               AND process_status = 'PROCESSING'
            """, as: Int.self)
        #expect(lease == 10, "the claim took the shipped lease")

        let survivor = try await WorkerHarness.launchWorker(shipped, name: "survivor")
        defer { survivor.kill() }
        let harness = WorkerHarness(ingress: pair.ingress, workers: [survivor])
        #expect(try await harness.outcome(of: uuid, timeout: 60) == .succeeded, "\(survivor.output.suffix(2000))")
        #expect(try await harness.value("SELECT worker_id FROM processed_event", as: String.self) == "survivor")
        #expect(try await harness.count("SELECT count(*) FROM credit_grant") == 1)
        try await harness.checkInvariants()
    }
}
