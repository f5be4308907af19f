import Domain
import Foundation
import ServiceRuntime

/// The credit settings of a fulfillment worker, read from its environment.
public struct CreditsConfiguration: Sendable {
    /// `WELCOME_CREDITS`: whole credits granted once to every user, in the WELCOME pool. 0 (the
    /// default) grants none.
    public var welcomeCredits: Int64
    /// `CREDITS_SCHEDULER_INTERVAL_SECONDS`: how often the jobs run (and at each UTC midnight);
    /// nil (0) runs none in this process. Default 60.
    public var schedulerInterval: Duration?
    /// `CREDITS_INVARIANT_INTERVAL_SECONDS`: how often balances are compared with their ledgers (by one
    /// worker per interval across the pool). Default 600.
    public var invariantInterval: Duration
    /// `CREDITS_BATCH_SIZE`: rows per job transaction. Default 1000.
    public var batchSize: Int
    /// `CREDITS_MAX_BALANCE`, `CREDITS_MAX_ADJUSTMENT`: what a grant may not pass.
    public var limits: CreditLimits

    public init(
        welcomeCredits: Int64 = 0, schedulerInterval: Duration? = .seconds(60), invariantInterval: Duration = .seconds(600), batchSize: Int = 1000,
        limits: CreditLimits = CreditLimits()
    ) {
        self.welcomeCredits = welcomeCredits
        self.schedulerInterval = schedulerInterval
        self.invariantInterval = invariantInterval
        self.batchSize = batchSize
        self.limits = limits
    }

    public init(reader: ConfigurationReader) {
        welcomeCredits = Int64(reader.int("WELCOME_CREDITS", default: 0, range: 0...1_000_000_000))
        let interval = reader.int("CREDITS_SCHEDULER_INTERVAL_SECONDS", default: 60, range: 0...86_400)
        schedulerInterval = interval == 0 ? nil : .seconds(interval)
        invariantInterval = .seconds(reader.int("CREDITS_INVARIANT_INTERVAL_SECONDS", default: 600, range: 1...604_800))
        batchSize = reader.int("CREDITS_BATCH_SIZE", default: 1000, range: 1...100_000)
        limits = CreditLimits(reader: reader)
    }
}

extension CreditLimits {
    /// `CREDITS_MAX_BALANCE` (whole credits per pool, default 10⁹) and `CREDITS_MAX_ADJUSTMENT`
    /// (whole credits, default 10⁷), each at most `CreditLimits.ceiling`.
    public init(reader: ConfigurationReader) {
        let ceiling = Int(CreditLimits.ceiling)
        self.init(
            maxBalanceCredits: Int64(reader.int("CREDITS_MAX_BALANCE", default: 1_000_000_000, range: 1...ceiling)),
            maxAdjustmentCredits: Int64(reader.int("CREDITS_MAX_ADJUSTMENT", default: 10_000_000, range: 1...ceiling)))
    }
}

/// Runs the credit jobs in a worker: every interval and right after each UTC midnight of its
/// clock, skipping a batch another worker is running (`CreditJobs` explains why that is safe);
/// and the ledger invariant check, once per interval across the workers.
public final class CreditsScheduler: Service {
    public let name = "credits-scheduler"
    public let jobs: CreditJobs
    private let clock: any WallClock
    private let stop = ShutdownTrigger()
    private let failures = MetricsRegistry.shared.counter(
        "subs_credit_job_failures_total", help: "Credit job passes that failed (retried at the next pass)")

    public init(jobs: CreditJobs, clock: any WallClock) {
        self.jobs = jobs
        self.clock = clock
    }

    public func run() async throws {
        guard let interval = jobs.configuration.schedulerInterval else { return await stop.wait() }
        while !stop.isFired {
            let now = clock.now()
            do {
                try await jobs.runAll(now: now, wait: false)
                try await jobs.checkInvariantIfDue(interval: jobs.configuration.invariantInterval)
            } catch {
                failures.increment()
                jobs.logger.warning("credit jobs pass failed", ["error": .string("\(error)")])
            }
            // Wake just after midnight too, so a day is closed within seconds of its end.
            let untilMidnight = UTCDay(containing: now).next.start.timeIntervalSince(clock.now()) + 1
            _ = await stop.wait(timeout: min(interval, .milliseconds(Int64(max(1, untilMidnight) * 1000))))
        }
    }

    public func shutdown() async { stop.fire() }
}
