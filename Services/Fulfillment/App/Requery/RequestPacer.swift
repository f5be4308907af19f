import Foundation

/// Spaces a worker's calls to Apple per environment so they stay under a rate: Apple limits each
/// endpoint's requests per second (Production more than Sandbox), and a scan that flags many chains
/// at once (after an outage, or the first scan of chains Apple left silent) must not exceed it.
actor RequestPacer {
    private let spacing: [String: Duration]
    private var next: [String: ContinuousClock.Instant] = [:]

    /// `rates`: the most requests per second per environment (Apple's spelling); an environment
    /// not named is not paced.
    init(rates: [String: Int]) {
        spacing = rates.filter { $0.value > 0 }.mapValues { .nanoseconds(1_000_000_000 / Int64($0)) }
    }

    /// Returns when a request to `environment` may start.
    func wait(for environment: String) async {
        guard let spacing = spacing[environment] else { return }
        let now = ContinuousClock.now
        let slot = max(now, next[environment] ?? now)
        next[environment] = slot + spacing
        if slot > now { try? await Task.sleep(until: slot, clock: .continuous) }
    }
}
