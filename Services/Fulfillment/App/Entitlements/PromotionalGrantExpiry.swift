import Foundation
import ServiceRuntime
import Storage

/// Ends promotional grants whose expiry has passed, every few seconds, each with its
/// `entitlement.expired` event (`EntitlementStore.expireDue`, SKIP LOCKED: safe with any number of
/// workers). Reads already judge a grant by the clock; this makes its end an event the app hears of.
final class PromotionalGrantExpiry: Service {
    let name = "promotional-grant-expiry"
    /// Often enough that the event follows the expiry within seconds; a pass with nothing due is one indexed read.
    static let interval: Duration = .seconds(5)
    static let batch = 500
    private let store: EntitlementStore
    private let clock: any WallClock
    private let logger: Logger
    private let stop = ShutdownTrigger()
    private let ended = MetricsRegistry.shared.counter(
        "subs_entitlement_grants_expired_total", help: "Promotional grants ended at their expiry, each with its event")
    private let failures = MetricsRegistry.shared.counter(
        "subs_entitlement_grant_expiry_failures_total", help: "Passes ending expired promotional grants that failed (retried)")

    init(store: EntitlementStore, clock: any WallClock, logger: Logger) {
        self.store = store
        self.clock = clock
        self.logger = logger
    }

    func run() async throws {
        while !stop.isFired {
            do {
                let count = try await runOnce(now: clock.now())
                if count > 0 { logger.info("promotional grants expired", ["entitlement.grants_expired": .int(Int64(count))]) }
            } catch {
                failures.increment()
                logger.warning("promotional grant expiry failed", ["error": .string("\(error)")])
            }
            _ = await stop.wait(timeout: Self.interval)
        }
    }

    func shutdown() async { stop.fire() }

    /// One pass at `now`, batch after batch until none is full; returns how many grants ended.
    @discardableResult
    func runOnce(now: Date) async throws -> Int {
        var total = 0
        while !stop.isFired {
            let count = try await store.expireDue(now: now, limit: Self.batch)
            total += count
            ended.increment(by: count)
            if count < Self.batch { break }
        }
        return total
    }
}
