import Foundation
import Synchronization

/// Process-wide registry of metrics, rendered in the Prometheus text exposition format.
///
/// Metrics are created once with fixed label values (never per request: unbounded label sets
/// are unbounded memory). Asking twice for the same name and labels returns the same instrument.
public final class MetricsRegistry: Sendable {
    /// The registry every service exposes at `/metrics`; it carries `subs_build_info` and the
    /// process metrics (`ProcessMetrics`) from the start.
    public static let shared: MetricsRegistry = {
        let registry = MetricsRegistry()
        registry.setCollector("process") { ProcessMetrics.families() }
        return registry
    }()

    private struct Family {
        let help: String
        let type: String
        var children: [String: any PrometheusRenderable]  // keyed by rendered label set
    }
    private let families = Mutex<[String: Family]>([:])
    private let collectors = Mutex<[String: @Sendable () -> [MetricFamily]]>([:])

    public init() {}

    public func counter(_ name: String, help: String, labels: [String: String] = [:]) -> Counter {
        instrument(name, help: help, type: "counter", labels: labels) { Counter(name: name, labels: $0) }
    }

    public func gauge(_ name: String, help: String, labels: [String: String] = [:]) -> Gauge {
        instrument(name, help: help, type: "gauge", labels: labels) { Gauge(name: name, labels: $0) }
    }

    /// A histogram; `buckets` are upper bounds in the metric's unit (seconds for durations).
    public func histogram(
        _ name: String, help: String, labels: [String: String] = [:],
        buckets: [Double] = Histogram.defaultDurationBuckets
    ) -> Histogram {
        instrument(name, help: help, type: "histogram", labels: labels) {
            Histogram(name: name, labels: $0, buckets: buckets)
        }
    }

    private func instrument<M: PrometheusRenderable>(
        _ name: String, help: String, type: String, labels: [String: String], make: (String) -> M
    ) -> M {
        let key = Self.renderLabels(labels)
        return families.withLock { families in
            var family = families[name] ?? Family(help: help, type: type, children: [:])
            precondition(family.type == type, "metric \(name) registered as \(family.type) and \(type)")
            if let existing = family.children[key] as? M { return existing }
            let made = make(key)
            family.children[key] = made
            families[name] = family
            return made
        }
    }

    /// Installs (or replaces) the collector named `name`: called at every scrape, it reports
    /// values read then (from /proc, a sampler's snapshot) and label sets that come and go, which
    /// fixed instruments cannot. Its families must not share names with instruments.
    public func setCollector(_ name: String, _ collect: @escaping @Sendable () -> [MetricFamily]) {
        collectors.withLock { $0[name] = collect }
    }

    /// Removes the collector named `name` (its families disappear from the next scrape).
    public func removeCollector(_ name: String) {
        _ = collectors.withLock { $0.removeValue(forKey: name) }
    }

    /// Prometheus text format, version 0.0.4.
    public func prometheusText() -> String {
        let snapshot = families.withLock { $0 }
        var out = ""
        for name in snapshot.keys.sorted() {
            let family = snapshot[name]!
            out += "# HELP \(name) \(family.help)\n# TYPE \(name) \(family.type)\n"
            for key in family.children.keys.sorted() { family.children[key]!.render(into: &out) }
        }
        let collect = collectors.withLock { $0 }
        for name in collect.keys.sorted() {
            for family in collect[name]!() where !family.samples.isEmpty { family.render(into: &out) }
        }
        return out
    }

    static func renderLabels(_ labels: [String: String], extra: (String, String)? = nil) -> String {
        var pairs = labels.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        if let extra { pairs.append(extra) }
        guard !pairs.isEmpty else { return "" }
        let body = pairs.map { key, value in
            let escaped = value.replacingOccurrences(of: "\\", with: "\\\\")
                .replacingOccurrences(of: "\"", with: "\\\"").replacingOccurrences(of: "\n", with: "\\n")
            return "\(key)=\"\(escaped)\""
        }
        return "{" + body.joined(separator: ",") + "}"
    }
}

protocol PrometheusRenderable: Sendable {
    func render(into out: inout String)
}

/// A value that only goes up.
public final class Counter: PrometheusRenderable {
    let name: String
    let labels: String
    private let count = Atomic<Int>(0)

    init(name: String, labels: String) {
        self.name = name
        self.labels = labels
    }

    public func increment(by amount: Int = 1) {
        precondition(amount >= 0, "a counter never decreases")
        count.add(amount, ordering: .relaxed)
    }

    public var value: Int { count.load(ordering: .relaxed) }

    func render(into out: inout String) { out += "\(name)\(labels) \(value)\n" }
}

/// A value that goes up and down.
public final class Gauge: PrometheusRenderable {
    let name: String
    let labels: String
    private let current = Mutex<Double>(0)

    init(name: String, labels: String) {
        self.name = name
        self.labels = labels
    }

    public func set(_ value: Double) { current.withLock { $0 = value } }
    public func add(_ delta: Double) { current.withLock { $0 += delta } }
    public var value: Double { current.withLock { $0 } }

    func render(into out: inout String) { out += "\(name)\(labels) \(Self.format(value))\n" }

    static func format(_ v: Double) -> String {
        if v.isNaN { return "NaN" }
        if v.isInfinite { return v > 0 ? "+Inf" : "-Inf" }
        return v == v.rounded() && abs(v) < 1e15 ? String(Int64(v)) : String(v)
    }
}

/// Distribution of observations in fixed buckets, with their sum and count.
public final class Histogram: PrometheusRenderable {
    /// Upper bounds suited to request and processing durations, in seconds.
    public static let defaultDurationBuckets: [Double] = [
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
    ]

    let name: String
    let labelPairs: String
    let buckets: [Double]
    private struct State {
        var counts: [Int]
        var sum: Double = 0
        var count: Int = 0
    }
    private let state: Mutex<State>

    init(name: String, labels: String, buckets: [Double]) {
        self.name = name
        self.labelPairs = labels
        self.buckets = buckets.sorted()
        self.state = Mutex(State(counts: Array(repeating: 0, count: buckets.count)))
    }

    public func observe(_ value: Double) {
        let index = buckets.firstIndex { value <= $0 }
        state.withLock { s in
            if let index { s.counts[index] += 1 }
            s.sum += value
            s.count += 1
        }
    }

    /// Observes the seconds elapsed since `start`.
    public func observe(since start: ContinuousClock.Instant) {
        let elapsed = ContinuousClock.now - start
        observe(elapsed.inSeconds)
    }

    public var count: Int { state.withLock { $0.count } }

    func render(into out: inout String) {
        let s = state.withLock { $0 }
        // Prometheus buckets are cumulative; the stored counts are per bucket.
        let inner = labelPairs.isEmpty ? "" : String(labelPairs.dropFirst().dropLast()) + ","
        var cumulative = 0
        for (bound, n) in zip(buckets, s.counts) {
            cumulative += n
            out += "\(name)_bucket{\(inner)le=\"\(Gauge.format(bound))\"} \(cumulative)\n"
        }
        out += "\(name)_bucket{\(inner)le=\"+Inf\"} \(s.count)\n"
        out += "\(name)_sum\(labelPairs) \(s.sum)\n\(name)_count\(labelPairs) \(s.count)\n"
    }
}

/// A family of samples a collector reports at scrape time.
public struct MetricFamily: Sendable, Equatable {
    public enum Kind: String, Sendable { case gauge, counter }

    public var name: String
    public var help: String
    public var kind: Kind
    /// Label sets and their values, rendered in this order.
    public var samples: [(labels: [String: String], value: Double)]

    public init(_ name: String, help: String, kind: Kind = .gauge, samples: [(labels: [String: String], value: Double)]) {
        self.name = name
        self.help = help
        self.kind = kind
        self.samples = samples
    }

    /// One unlabelled sample.
    public init(_ name: String, help: String, kind: Kind = .gauge, value: Double) {
        self.init(name, help: help, kind: kind, samples: [([:], value)])
    }

    func render(into out: inout String) {
        out += "# HELP \(name) \(help)\n# TYPE \(name) \(kind.rawValue)\n"
        for (labels, value) in samples {
            out += "\(name)\(MetricsRegistry.renderLabels(labels)) \(Gauge.format(value))\n"
        }
    }

    public static func == (lhs: MetricFamily, rhs: MetricFamily) -> Bool {
        lhs.name == rhs.name && lhs.help == rhs.help && lhs.kind == rhs.kind && lhs.samples.count == rhs.samples.count
            && zip(lhs.samples, rhs.samples).allSatisfy { $0.labels == $1.labels && $0.value == $1.value }
    }
}
