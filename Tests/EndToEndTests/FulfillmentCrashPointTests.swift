import AppStore
import Foundation
import FulfillmentApp
import Postgres
import TestSupport
import Testing

/// Scenario 30: a worker killed -9 in the middle of an event's processing, at each write point
/// (`FULFILLMENT_CRASH_POINT`), and restarted: its lease runs out, the restarted worker completes
/// the event, and the purchase is applied exactly once.
@Suite(.serialized, .timeLimit(.minutes(4)))
struct FulfillmentCrashPointTests {
    @Test(arguments: CrashPoint.Point.allCases)
    func aWorkerKilledAtAWritePointLeavesTheEventAppliedExactlyOnce(point: CrashPoint.Point) async throws {
        let pair = try await WorkerHarness.start(workers: 0)
        defer { pair.stop() }
        let marker = FileManager.default.temporaryDirectory.appendingPathComponent(TestEnvironment.uniqueName("crash"))
        defer { try? FileManager.default.removeItem(at: marker) }
        let crashing = pair.ingress.environment.merging([
            "FULFILLMENT_CRASH_POINT": point.rawValue, "FULFILLMENT_CRASH_MARKER": marker.path,
        ]) { _, new in new }
        let first = try await WorkerHarness.launchWorker(crashing, name: "crashing")
        defer { first.kill() }

        let token = try await pair.user("alice")
        let id = String(UInt64.random(in: 3_000_000_000_000_000...3_999_999_999_999_999))
        let uuid = try await pair.notify(
            .subscribed, .initialBuy, transaction: pair.transaction(id, token: token),
            renewal: pair.renewalInfo(original: id))
        #expect(await first.waitForExit(timeout: 60) == SIGKILL, "\(first.output.suffix(2000))")
        #expect(FileManager.default.fileExists(atPath: marker.path))

        // Restarted with the same settings: the marker keeps it alive.
        let second = try await WorkerHarness.launchWorker(crashing, name: "restarted")
        let harness = WorkerHarness(ingress: pair.ingress, workers: [second])
        defer { second.kill() }
        #expect(try await harness.outcome(of: uuid, timeout: 60) == .succeeded, "\(second.output.suffix(2000))")
        #expect(try await harness.subscription(id)?.status == "ACTIVE")
        #expect(try await harness.balance("alice") == 1000)
        #expect(try await harness.count("SELECT count(*) FROM credit_grant") == 1)
        #expect(try await harness.count("SELECT count(*) FROM credit_ledger") == 1)
        #expect(try await harness.count("SELECT count(*) FROM apple_transaction") == 1)
        #expect(try await harness.count("SELECT count(*) FROM payment_order WHERE status = 'FULFILLED'") == 1)
        #expect(try await harness.count("SELECT count(*) FROM processed_event") == 1)
        // The outbound events committed with the purchase, once: granted, the order, the grant.
        #expect(
            try await harness.value("SELECT string_agg(type || '#' || sequence, ',' ORDER BY seq) FROM outbound_event", as: String.self)
                == "entitlement.granted#1,order.fulfilled#2,credits.granted#3")
        // Before the commit the crash left nothing; at the commit point the first worker's
        // transaction is the one that counts.
        let completedBy = try await harness.value("SELECT worker_id FROM processed_event", as: String.self)
        #expect(completedBy == (point == .committed ? "crashing" : "restarted"))
        try await harness.checkInvariants()
    }
}
