import AppStore
import AppStoreTestSupport
import Foundation
import TestSupport
import Testing

/// Junk sent to the Apple endpoints spends a budget of its own, so it cannot starve the genuine
/// notifications that share its source (all of Apple behind one load balancer).
@Suite(.timeLimit(.minutes(3)))
struct NotificationBudgetTests {
    let sandboxPath = "/api/v1/iap/apple/notifications/sandbox"

    func genuine(_ harness: IngressTestApp) throws -> String {
        try harness.signer.signNotification(
            type: .didRenew, bundleId: IngressTestApp.bundleID, environment: .sandbox,
            transaction: TestPayloads.transaction(bundleId: IngressTestApp.bundleID, environment: .sandbox))
    }

    func post(_ harness: IngressTestApp, _ jws: String, from peer: String, forwardedFor: String? = nil) async throws -> Int {
        var headers = ["Content-Type": "application/json"]
        headers["X-Forwarded-For"] = forwardedFor
        let body = Array(try JSONSerialization.data(withJSONObject: ["signedPayload": jws]))
        return await harness.request("POST", sandboxPath, headers: headers, body: body, remoteAddress: peer).status
    }

    @Test func junkFromASourceNeverSpendsTheBudgetOfGenuineNotificationsFromIt() async throws {
        try await IngressTestApp.with(extra: [
            "INGRESS_NOTIFICATION_RATE_PER_SECOND": "1", "INGRESS_NOTIFICATION_RATE_BURST": "30",
            "INGRESS_UNVERIFIED_RATE_PER_SECOND": "1", "INGRESS_UNVERIFIED_RATE_BURST": "5",
        ]) { harness in
            let forged = try TestAppleSigner().signNotification(type: .didRenew, bundleId: IngressTestApp.bundleID, environment: .sandbox)
            let signed = try (0..<25).map { _ in try genuine(harness) }
            let junk = Array(repeating: forged, count: 60) + Array(repeating: "not.a.jws", count: 40)
            let results = try await withThrowingTaskGroup(of: (Bool, Int).self) { group in
                for (index, jws) in (junk + signed).enumerated().shuffled() {
                    group.addTask { (index >= junk.count, try await post(harness, jws, from: "10.1.2.3")) }
                }
                return try await group.reduce(into: [(Bool, Int)]()) { $0.append($1) }
            }
            let genuineStatuses = results.filter(\.0).map(\.1)
            let junkStatuses = results.filter { !$0.0 }.map(\.1)
            #expect(genuineStatuses == Array(repeating: 200, count: 25), "\(genuineStatuses)")
            #expect(junkStatuses.filter { $0 == 429 }.count >= 90, "\(junkStatuses)")
            #expect(Set(junkStatuses).isSubset(of: [400, 401, 429]), "\(junkStatuses)")
        }
    }

    @Test func behindATrustedProxyTheForwardedClientIsTheSource() async throws {
        try await IngressTestApp.with(extra: [
            "INGRESS_UNVERIFIED_RATE_PER_SECOND": "1", "INGRESS_UNVERIFIED_RATE_BURST": "2",
            "INGRESS_TRUSTED_PROXIES": "10.0.0.0/8, 2001:db8::/32",
        ]) { harness in
            // One attacker behind the proxy exhausts its own budget, not another client's.
            var attacker: [Int] = []
            for _ in 0..<5 { attacker.append(try await post(harness, "x.y.z", from: "10.0.0.5", forwardedFor: "203.0.113.7")) }
            #expect(attacker == [400, 400, 429, 429, 429])
            #expect(try await post(harness, "x.y.z", from: "10.9.9.9", forwardedFor: "203.0.113.7, 10.0.0.7") == 429)
            #expect(try await post(harness, "x.y.z", from: "10.0.0.5", forwardedFor: "203.0.113.8") == 400)
            // A client cannot pick its source by writing the header itself: an untrusted peer is the source.
            var direct: [Int] = []
            for index in 0..<4 {
                direct.append(try await post(harness, "x.y.z", from: "192.0.2.1", forwardedFor: "198.51.100.\(index)"))
            }
            #expect(direct == [400, 400, 429, 429])
        }
    }
}
