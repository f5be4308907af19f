import Foundation
import Testing

@testable import ServiceRuntime

/// `subs_build_info` and the process metrics every service exports, read from this test process,
/// and the registry's collectors that carry them.
@Suite struct ProcessMetricsTests {
    static func value(_ name: String, in families: [MetricFamily]) -> Double? {
        families.first { $0.name == name }?.samples.first?.value
    }

    @Test func theProcessReportsItsOwnMemoryDescriptorsCPUAndThreads() throws {
        let families = ProcessMetrics.families()
        let resident = try #require(Self.value("process_resident_memory_bytes", in: families))
        #expect(resident > 1_000_000, "a Swift test process holds more than a megabyte")
        let descriptors = try #require(Self.value("process_open_fds", in: families))
        // 200 more, checked with a margin of 100: suites running beside this one open and close
        // descriptors of their own between the two reads.
        let handles = try (0..<200).map { _ in try FileHandle(forReadingFrom: URL(fileURLWithPath: "/proc/self/stat")) }
        #expect(try #require(Self.value("process_open_fds", in: ProcessMetrics.families())) >= descriptors + 100)
        for handle in handles { try handle.close() }
        #expect(try #require(Self.value("process_threads", in: families)) >= 1)
        #expect(try #require(Self.value("process_max_fds", in: families)) >= descriptors)
        let cpu = try #require(Self.value("process_cpu_seconds_total", in: families))
        var spin = 0.0
        for index in 0..<20_000_000 { spin += Double(index & 7) }
        #expect(spin > 0)
        #expect(try #require(Self.value("process_cpu_seconds_total", in: ProcessMetrics.families())) > cpu)
        let started = try #require(Self.value("process_start_time_seconds", in: families))
        #expect(abs(started - Date().timeIntervalSince1970) < 24 * 3600)
    }

    @Test func buildInfoNamesVersionAndRevision() throws {
        let build = try #require(ProcessMetrics.families().first { $0.name == "subs_build_info" })
        #expect(build.samples.count == 1 && build.samples[0].value == 1)
        #expect(build.samples[0].labels["version"] == BuildInfo.version)
        #expect(build.samples[0].labels["revision"] == BuildInfo.revision && !BuildInfo.revision.isEmpty)
        #expect(MetricsRegistry.shared.prometheusText().contains("process_resident_memory_bytes "))
    }

    @Test func collectorsAreAskedAtEveryScrapeAndCanBeReplacedOrRemoved() {
        let registry = MetricsRegistry()
        let calls = Locked(0)
        registry.setCollector("test") {
            let call = calls.withLock { value -> Int in
                value += 1
                return value
            }
            return [
                MetricFamily("test_gauge", help: "Calls so far", samples: [(["code": "A\"B"], Double(call))]),
                MetricFamily("test_empty", help: "No samples: not rendered", samples: []),
            ]
        }
        #expect(registry.prometheusText() == "# HELP test_gauge Calls so far\n# TYPE test_gauge gauge\ntest_gauge{code=\"A\\\"B\"} 1\n")
        #expect(registry.prometheusText().contains("test_gauge{code=\"A\\\"B\"} 2\n"))
        registry.setCollector("test") { [MetricFamily("test_other", help: "Replaced", kind: .counter, value: 7)] }
        #expect(registry.prometheusText() == "# HELP test_other Replaced\n# TYPE test_other counter\ntest_other 7\n")
        registry.removeCollector("test")
        #expect(registry.prometheusText().isEmpty)
    }

    @Test func procStatFieldsAreCountedAfterTheCommandName() throws {
        // A command name with spaces and parentheses must not shift the fields.
        var fields = ["S"] + (4...52).map { String($0 * 10) }
        fields[14 - 3] = "300"  // utime ticks
        fields[15 - 3] = "100"  // stime ticks
        fields[20 - 3] = "7"  // threads
        fields[22 - 3] = "5000"  // start, ticks after boot
        fields[24 - 3] = "256"  // rss pages
        let line = "1234 (my (odd) name) " + fields.joined(separator: " ")
        let stat = try #require(ProcStat.parse(line, ticksPerSecond: 100, pageSize: 4096, bootTime: 1_000_000))
        #expect(stat.cpuSeconds == 4 && stat.residentBytes == 256 * 4096 && stat.threads == 7)
        #expect(stat.startTime == 1_000_050)
        #expect(ProcStat.parse("1234 no-parenthesis S 1 2", ticksPerSecond: 100, pageSize: 4096, bootTime: 0) == nil)
    }
}
