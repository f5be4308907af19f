import Foundation

/// What a build is: its version (kept in step with CHANGELOG.md) and the source revision the
/// image was built from (`SUBS_BUILD_REVISION`, set by the Dockerfile's `SUBS_REVISION` argument).
public enum BuildInfo {
    public static let version = "0.1.0-dev"
    public static var revision: String {
        ProcessInfo.processInfo.environment["SUBS_BUILD_REVISION"].flatMap { $0.isEmpty ? nil : $0 } ?? "unknown"
    }

    /// What `--version` prints, the same for every executable: `ingress 0.1.0-dev (revision abc123)`.
    public static func versionLine(of program: String) -> String {
        "\(program) \(version) (revision \(revision))"
    }
}

/// `subs_build_info` and the standard process metrics, read from /proc at scrape time (Linux):
/// resident memory, open and maximum descriptors, CPU seconds, threads, start time.
public enum ProcessMetrics {
    public static func families() -> [MetricFamily] {
        var families = [
            MetricFamily(
                "subs_build_info", help: "Build of this process (value 1)",
                samples: [
                    (["service": ProcessInfo.processInfo.processName, "version": BuildInfo.version, "revision": BuildInfo.revision], 1)
                ])
        ]
        if let stat = ProcStat.read() {
            families += [
                MetricFamily(
                    "process_cpu_seconds_total", help: "User and system CPU time spent, in seconds", kind: .counter,
                    value: stat.cpuSeconds),
                MetricFamily("process_resident_memory_bytes", help: "Resident memory size in bytes", value: stat.residentBytes),
                MetricFamily("process_threads", help: "Threads of the process", value: stat.threads),
                MetricFamily(
                    "process_start_time_seconds", help: "Start time of the process since the Unix epoch, in seconds",
                    value: stat.startTime),
            ]
        }
        if let open = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") {
            families.append(MetricFamily("process_open_fds", help: "Open file descriptors", value: Double(open.count)))
        }
        var limit = rlimit()
        if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 {
            families.append(MetricFamily("process_max_fds", help: "Maximum open file descriptors", value: Double(limit.rlim_cur)))
        }
        return families
    }
}

/// The fields of /proc/self/stat the metrics need (proc(5)).
struct ProcStat {
    var cpuSeconds: Double
    var residentBytes: Double
    var threads: Double
    var startTime: Double

    static func read() -> ProcStat? {
        guard let text = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8) else { return nil }
        return parse(
            text, ticksPerSecond: Double(sysconf(Int32(_SC_CLK_TCK))), pageSize: Double(sysconf(Int32(_SC_PAGESIZE))),
            bootTime: bootTime())
    }

    /// `text` is /proc/self/stat; the command name (field 2) may hold spaces and parentheses, so
    /// fields are counted after its last ')'.
    static func parse(_ text: String, ticksPerSecond: Double, pageSize: Double, bootTime: Double) -> ProcStat? {
        guard let close = text.lastIndex(of: ")") else { return nil }
        // Field 3 (state) is the first after the name: index i here is field i + 3.
        let fields = text[text.index(after: close)...].split(separator: " ")
        func field(_ number: Int) -> Double? { fields.count > number - 3 ? Double(fields[number - 3]) : nil }
        guard let utime = field(14), let stime = field(15), let threads = field(20), let start = field(22), let rss = field(24),
            ticksPerSecond > 0
        else { return nil }
        return ProcStat(
            cpuSeconds: (utime + stime) / ticksPerSecond, residentBytes: rss * pageSize, threads: threads,
            startTime: bootTime + start / ticksPerSecond)
    }

    /// Seconds since the epoch at boot (`btime` of /proc/stat), 0 when unknown.
    static func bootTime() -> Double {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
            let line = text.split(separator: "\n").first(where: { $0.hasPrefix("btime ") })
        else { return 0 }
        return Double(line.dropFirst(6).trimmingCharacters(in: .whitespaces)) ?? 0
    }
}
