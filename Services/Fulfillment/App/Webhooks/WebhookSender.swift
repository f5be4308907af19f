import Crypto
import Dispatch
import Foundation
import OutboundHTTP
import Pipeline
import ServiceRuntime
import Storage
import Synchronization
import Webhooks

/// Sends the deliveries of `webhook_delivery`: one loop claims due rows under leases (at most
/// `WEBHOOK_ENDPOINT_CONCURRENCY` in flight per endpoint, `WEBHOOK_CONCURRENCY` in all) and records
/// the outcomes in batches; a pool of threads, each with its own keep-alive libcurl handle, makes the
/// requests. A failed attempt is tried again after an exponential backoff with full jitter, until
/// `WEBHOOK_MAX_ATTEMPTS`, then the delivery is DEAD.
public final class WebhookSender: Service, Sendable {
    /// A claimed delivery with its signed headers, for a sender thread.
    struct Job: Sendable {
        let claim: WebhookStore.Claim
        let headers: [String]
    }

    struct State {
        var stopping = false
        /// A claim may find work now (an event was enqueued, a slot freed).
        var woken = true
        /// Claimed and not yet recorded: queued for a thread or being sent.
        var inFlight = 0
        /// Requests being sent, per endpoint (at most `WEBHOOK_ENDPOINT_CONCURRENCY` each).
        var sending: [String: Int] = [:]
        var outcomes: [WebhookStore.Outcome] = []
        var jobs: [Job] = []
        var threadsClosed = false
    }

    public let name = "webhook-sender"
    let store: WebhookStore
    let cipher: PayloadCipher
    let configuration: WebhookConfiguration
    let owner: String
    let clock: any WallClock
    let logger: Logger
    let sampleInterval: Duration
    let state = Mutex(State())
    /// Deliveries claimed ahead of the threads, per sending slot: the threads always have work
    /// queued while the loop records and claims, without a round trip between two requests.
    static let prefetch = 8
    /// Wakes a thread: a job queued, a request ended (another endpoint's job may now go), the close.
    let jobSignal = DispatchSemaphore(value: 0)
    let finished = ShutdownTrigger()
    let threadsDone = ShutdownTrigger()
    let webhooks: KindMetrics
    let latency: Histogram
    /// The forwards of Apple's notifications (APPLE_FORWARD endpoints), counted apart.
    let forwards: KindMetrics

    /// The counters and gauges of one kind of endpoint: attempts by outcome, backlog and lag. The
    /// names are given whole: the deployment check finds every alert's metric in the sources.
    struct KindMetrics {
        let delivered: Counter
        let failed: Counter
        let dead: Counter
        let backlog: Gauge
        let lag: Gauge

        init(deliveries name: String, backlog backlogName: String, lag lagName: String, attempts: String, waiting: String, oldest: String) {
            let registry = MetricsRegistry.shared
            let help = "\(attempts) by outcome (failed: tried again later; dead: given up)"
            delivered = registry.counter(name, help: help, labels: ["outcome": "delivered"])
            failed = registry.counter(name, help: help, labels: ["outcome": "failed"])
            dead = registry.counter(name, help: help, labels: ["outcome": "dead"])
            backlog = registry.gauge(backlogName, help: "\(waiting) waiting (due or backing off)")
            lag = registry.gauge(lagName, help: "How long the oldest due \(oldest) has waited since it became due")
        }

        func record(delivered: Int, retrying: Int, dead: Int) {
            self.delivered.increment(by: delivered)
            failed.increment(by: retrying)
            self.dead.increment(by: dead)
        }
    }

    public init(
        store: WebhookStore, cipher: PayloadCipher, configuration: WebhookConfiguration, owner: String,
        clock: any WallClock = SystemClock(), sampleInterval: Duration = .seconds(15), logger: Logger
    ) {
        self.store = store
        self.cipher = cipher
        self.configuration = configuration
        self.owner = owner
        self.clock = clock
        self.sampleInterval = sampleInterval
        self.logger = logger.with(["component": .string("webhooks")])
        webhooks = KindMetrics(
            deliveries: "subs_webhook_deliveries_total", backlog: "subs_webhook_backlog", lag: "subs_webhook_lag_seconds",
            attempts: "Webhook delivery attempts", waiting: "Webhook deliveries on live endpoints",
            oldest: "webhook delivery")
        latency = MetricsRegistry.shared.histogram(
            "subs_webhook_delivery_seconds", help: "From an event's arrival for delivery to its delivery (2xx)")
        forwards = KindMetrics(
            deliveries: "subs_apple_forward_deliveries_total", backlog: "subs_apple_forward_backlog",
            lag: "subs_apple_forward_lag_seconds", attempts: "Forwards of Apple's notifications, attempts",
            waiting: "Forwards of Apple's notifications", oldest: "forward of an Apple notification")
    }

    /// Tells the loop that work may be due now (called after an event is enqueued).
    public func wake() { state.withLock { $0.woken = true } }

    public func run() async throws {
        defer { finished.fire() }
        let threads = max(1, configuration.concurrency)
        let remaining = Atomic<Int>(threads)
        for index in 0..<threads {
            let client = try OutboundHTTPClient(
                policy: AddressPolicy(
                    allowHTTP: configuration.allowHTTP, allowPrivateNetworks: configuration.allowPrivateNetworks),
                timeout: configuration.timeout)
            let thread = Thread { [self] in
                senderLoop(client)
                if remaining.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { threadsDone.fire() }
            }
            thread.name = "webhook-sender-\(index)"
            thread.start()
        }
        defer {
            state.withLock { $0.threadsClosed = true }
            for _ in 0..<threads { jobSignal.signal() }
        }
        var nextClaim = ContinuousClock.now
        var nextSample = ContinuousClock.now
        while true {
            if Task.isCancelled { state.withLock { $0.stopping = true } }
            let (stopping, woken, inFlight, outcomes) = state.withLock { state in
                defer { state.outcomes.removeAll() }
                return (state.stopping, state.woken, state.inFlight, state.outcomes)
            }
            if stopping && inFlight == 0 && outcomes.isEmpty { return }
            var worked = false
            if !outcomes.isEmpty {
                worked = true
                await record(outcomes)
            }
            let free = configuration.concurrency * Self.prefetch - inFlight
            let now = ContinuousClock.now
            if !stopping, free > 0, woken || now >= nextClaim {
                worked = true
                state.withLock { $0.woken = false }
                nextClaim = now + .milliseconds(200)
                await claim(free)
            }
            if now >= nextSample {
                nextSample = now + sampleInterval
                await sample()
            }
            // Not Task.sleep: once cancelled it would return at once, and the loop still waits for
            // the requests in flight. Outcomes and this process's new deliveries wake it within the
            // pause; 5 ms made every idle worker wake 200 times a second.
            if !worked { await Self.pause(.milliseconds(50)) }
        }
    }

    static func pause(_ duration: Duration) async {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(Int(duration.components.attoseconds / 1_000_000_000))) {
                continuation.resume()
            }
        }
    }

    public func shutdown() async {
        state.withLock { $0.stopping = true }
        // In-flight requests end within their timeout; what is left is recorded before the pool closes.
        _ = await finished.wait(timeout: configuration.timeout + .seconds(5))
    }

    func claim(_ free: Int) async {
        let claims: [WebhookStore.Claim]
        do {
            // A queued delivery waits for at most `prefetch` requests of its endpoint before its own.
            claims = try await store.claim(
                owner: owner, limit: free, perEndpoint: configuration.endpointConcurrency * Self.prefetch,
                lease: configuration.timeout * (Self.prefetch + 1) + .seconds(30))
        } catch {
            if let suppressed = LogThrottle.shared.admit("webhook-claim") {
                logger.warning("webhook claim failed", ["error": .string("\(error)"), "suppressed": .int(Int64(suppressed))])
            }
            return
        }
        guard !claims.isEmpty else { return }
        var jobs: [Job] = []
        var unsigned: [WebhookStore.Outcome] = []
        let timestamp = Int64(clock.now().timeIntervalSince1970)
        for claim in claims {
            do {
                var keys = [try WebhookSigning.openKey(claim.secret, endpointID: claim.endpointID, cipher: cipher)]
                if let previous = claim.previousSecret {
                    keys.append(try WebhookSigning.openKey(previous, endpointID: claim.endpointID, cipher: cipher))
                }
                let signature = WebhookSigning.signature(id: claim.eventID, timestamp: timestamp, body: claim.payload, keys: keys)
                jobs.append(
                    Job(
                        claim: claim,
                        headers: [
                            "Content-Type: application/json", "webhook-id: \(claim.eventID)", "webhook-timestamp: \(timestamp)",
                            "webhook-signature: \(signature)",
                        ]))
            } catch {
                // A secret that no longer opens (its payload key was dropped) fails like an attempt.
                unsigned.append(outcome(claim, OutboundHTTPResult(statusCode: nil, error: "the endpoint's secret does not open: \(error)")))
            }
        }
        // Claimed as many as there was room for: more may be due at once.
        state.withLock { state in
            state.inFlight += jobs.count
            state.jobs.append(contentsOf: jobs)
            state.outcomes.append(contentsOf: unsigned)
            if claims.count == free { state.woken = true }
        }
        for _ in jobs { jobSignal.signal() }
    }

    func senderLoop(_ client: OutboundHTTPClient) {
        let perEndpoint = configuration.endpointConcurrency
        while true {
            // The first queued job whose endpoint has a sending slot free: a slow endpoint's
            // queue never holds the threads from the others'.
            let (job, closed): (Job?, Bool) = state.withLock { state in
                guard let index = state.jobs.firstIndex(where: { state.sending[$0.claim.endpointID, default: 0] < perEndpoint })
                else { return (nil, state.threadsClosed) }
                let job = state.jobs.remove(at: index)
                state.sending[job.claim.endpointID, default: 0] += 1
                return (job, false)
            }
            guard let job else {
                if closed { return }
                // Every queued job and every freed slot signals; the timeout only bounds what a
                // missed signal costs. At 5 ms, the 32 idle senders of each worker woke 6,400
                // times a second and loaded a machine of workers.
                _ = jobSignal.wait(timeout: .now() + .milliseconds(100))
                continue
            }
            let result = client.post(url: job.claim.url, headers: job.headers, body: job.claim.payload)
            let outcome = outcome(job.claim, result)
            state.withLock { state in
                state.inFlight -= 1
                state.sending[job.claim.endpointID, default: 1] -= 1
                if state.sending[job.claim.endpointID] == 0 { state.sending[job.claim.endpointID] = nil }
                state.outcomes.append(outcome)
                state.woken = true
            }
            jobSignal.signal()
        }
    }

    func outcome(_ claim: WebhookStore.Claim, _ result: OutboundHTTPResult) -> WebhookStore.Outcome {
        let attempt = claim.attempts + 1
        let success = result.statusCode.map { (200...299).contains($0) } ?? false
        return WebhookStore.Outcome(
            seq: claim.seq, delivered: success, statusCode: result.statusCode,
            error: success ? nil : result.error ?? result.statusCode.map { "the endpoint answered \($0)" },
            retryAfter: RetryPolicy.delay(attempt: attempt, base: configuration.retryBase, max: configuration.retryMax),
            final: !success && attempt >= configuration.maxAttempts)
    }

    func record(_ outcomes: [WebhookStore.Outcome]) async {
        do {
            let recorded = try await store.record(outcomes, owner: owner)
            webhooks.record(delivered: recorded.delivered, retrying: recorded.retrying, dead: recorded.dead)
            forwards.record(delivered: recorded.forwards.delivered, retrying: recorded.forwards.retrying, dead: recorded.forwards.dead)
            if recorded.forwards.dead > 0 {
                logger.warning("Apple notification forwards given up (DEAD)", ["count": .int(Int64(recorded.forwards.dead))])
            }
            for seconds in recorded.deliveredLatencies { latency.observe(seconds) }
            if recorded.dead > 0 {
                logger.warning("webhook deliveries given up (DEAD)", ["count": .int(Int64(recorded.dead))])
            }
        } catch {
            // Kept for the next turn: the leases outlast a short database outage.
            state.withLock { $0.outcomes.insert(contentsOf: outcomes, at: 0) }
            if let suppressed = LogThrottle.shared.admit("webhook-record") {
                logger.warning("webhook outcomes not recorded yet", ["error": .string("\(error)"), "suppressed": .int(Int64(suppressed))])
            }
            try? await Task.sleep(for: .milliseconds(200))
        }
    }

    func sample() async {
        for (kind, metrics) in [(WebhookStore.EndpointKind.webhook, webhooks), (.appleForward, forwards)] {
            guard let (waiting, seconds) = try? await store.backlog(kind: kind) else { continue }
            metrics.backlog.set(Double(waiting))
            metrics.lag.set(seconds)
        }
    }
}
