import CCurl
import CShims
import Foundation
import ServiceRuntime

/// One keep-alive HTTP/1.1 connection on a libcurl easy handle: blocking, one request at a time.
///
/// For load generators only: URLSession's hops between dispatch queues cost a test driver ~0.4 ms
/// of CPU per request, which a benchmark's driver takes from the system it measures.
/// Sendable only to be handed to the thread that then uses it alone: one request at a time.
public final class CurlConnection: @unchecked Sendable {
    public struct Response {
        public var status: Int
        public var body: [UInt8]
        public var text: String { String(decoding: body, as: UTF8.self) }
    }

    /// Collects a response body; passed to libcurl's write callback as its user data.
    private final class Sink {
        var bytes: [UInt8] = []
    }

    private static let initialized: Bool = curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK

    private let handle: UnsafeMutableRawPointer
    private let baseURL: String
    private let sink = Sink()

    public init(baseURL: String) throws {
        guard Self.initialized, let handle = curl_easy_init() else { throw CurlError(message: "curl_easy_init failed") }
        self.handle = handle
        self.baseURL = baseURL
        // Several connections run on several threads: no signals for timeouts.
        _ = cshims_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1)
        _ = cshims_curl_setopt_long(handle, CURLOPT_TIMEOUT_MS, 30_000)
        _ = cshims_curl_setopt_write_function(handle) { data, size, count, user in
            guard let data, let user else { return 0 }
            Unmanaged<Sink>.fromOpaque(user).takeUnretainedValue().bytes.append(
                contentsOf: UnsafeRawBufferPointer(start: data, count: size * count))
            return size * count
        }
        _ = cshims_curl_setopt_pointer(handle, CURLOPT_WRITEDATA, Unmanaged.passUnretained(sink).toOpaque())
    }

    deinit { curl_easy_cleanup(handle) }

    /// Sends one request on the connection (reopened by libcurl if the server closed it).
    public func request(_ method: String, _ path: String, headers: [String] = [], body: [UInt8]? = nil) throws -> Response {
        sink.bytes.removeAll(keepingCapacity: true)
        // An empty Expect header: no 100-continue round trip before a body.
        var list: UnsafeMutablePointer<curl_slist>?
        for header in headers + ["Expect:"] { list = curl_slist_append(list, header) }
        defer { curl_slist_free_all(list) }
        _ = cshims_curl_setopt_pointer(handle, CURLOPT_HTTPHEADER, list)
        _ = cshims_curl_setopt_pointer(handle, CURLOPT_URL, baseURL + path)
        if let body {
            _ = cshims_curl_setopt_long(handle, CURLOPT_POSTFIELDSIZE, body.count)
            _ = body.withUnsafeBytes { cshims_curl_setopt_pointer(handle, CURLOPT_COPYPOSTFIELDS, $0.baseAddress) }
        } else {
            _ = cshims_curl_setopt_long(handle, CURLOPT_HTTPGET, 1)
        }
        _ = cshims_curl_setopt_pointer(handle, CURLOPT_CUSTOMREQUEST, method)
        let code = curl_easy_perform(handle)
        guard code == CURLE_OK else { throw CurlError(message: String(cString: curl_easy_strerror(code))) }
        var status = 0
        _ = cshims_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        return Response(status: status, body: sink.bytes)
    }
}

/// A libcurl failure, with libcurl's description.
public struct CurlError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { "curl: \(message)" }
}

/// An open-loop load generator: each job runs at its due time on one of `connections` threads,
/// each thread with its own keep-alive connection, whatever the earlier jobs are doing; a job may
/// ask to run again at a later time (a poll). One dispatcher thread sleeps until the next due job
/// and wakes one idle worker for it.
///
/// Sendable: the queue and counters are only touched under `condition`'s lock.
public final class LoadGenerator: @unchecked Sendable {
    /// Runs once per due time; returns when to run again, or nil when done.
    public typealias Job = @Sendable (CurlConnection) -> ContinuousClock.Instant?

    private let baseURL: String
    private let connections: Int
    private let condition = NSCondition()
    private var scheduled: [(due: ContinuousClock.Instant, job: Job)] = []  // sorted by due
    private var ready: [Job] = []
    private var running = 0
    private var finished = false
    private let wake = DispatchSemaphore(value: 0)

    public init(baseURL: String, connections: Int) {
        self.baseURL = baseURL
        self.connections = connections
    }

    /// Adds a job; call before `run()` or from a job.
    public func schedule(at due: ContinuousClock.Instant, _ job: @escaping Job) {
        condition.lock()
        insert(due, job)
        condition.signal()
        condition.unlock()
    }

    /// Runs every job (and its repeats) to completion.
    public func run() async throws {
        let connections = try (0..<connections).map { _ in try CurlConnection(baseURL: baseURL) }
        let group = DispatchGroup()
        for connection in connections {
            group.enter()
            Thread.detachNewThread { [self] in
                work(connection)
                group.leave()
            }
        }
        group.enter()
        Thread.detachNewThread { [self] in
            dispatch()
            group.leave()
        }
        await withCheckedContinuation { continuation in group.notify(queue: .global()) { continuation.resume() } }
    }

    private func insert(_ due: ContinuousClock.Instant, _ job: @escaping Job) {
        var low = 0
        var high = scheduled.count
        while low < high {
            let middle = (low + high) / 2
            if scheduled[middle].due <= due { low = middle + 1 } else { high = middle }
        }
        scheduled.insert((due, job), at: low)
    }

    private func dispatch() {
        condition.lock()
        while true {
            guard let next = scheduled.first else {
                if ready.isEmpty && running == 0 { break }
                condition.wait()
                continue
            }
            let now = ContinuousClock.now
            if next.due > now {
                let wait = next.due - now
                _ = condition.wait(until: Date(timeIntervalSinceNow: wait.inSeconds))
                continue
            }
            scheduled.removeFirst()
            ready.append(next.job)
            wake.signal()
        }
        finished = true
        condition.unlock()
        for _ in 0..<connections { wake.signal() }
    }

    private func work(_ connection: CurlConnection) {
        while true {
            wake.wait()
            condition.lock()
            guard !ready.isEmpty else {
                let done = finished
                condition.unlock()
                if done { return }
                continue
            }
            let job = ready.removeFirst()
            running += 1
            condition.unlock()
            let again = job(connection)
            condition.lock()
            running -= 1
            if let again { insert(again, job) }
            condition.signal()
            condition.unlock()
        }
    }
}
