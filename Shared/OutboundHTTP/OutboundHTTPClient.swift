import CCurl
import CShims
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// How one outbound request ended: the answer's status, or why there was none.
public struct OutboundHTTPResult: Sendable, Equatable {
    /// Nil when no answer came (refused address, connection failure, timeout).
    public var statusCode: Int?
    /// Nil for an answer; otherwise what went wrong, for operators (no secrets, no bodies).
    public var error: String?

    public init(statusCode: Int?, error: String?) {
        self.statusCode = statusCode
        self.error = error
    }
}

/// A POST client over one libcurl easy handle (its connections kept alive between requests) for
/// URLs someone else chose: the address policy is applied to every address it connects to (curl's
/// open-socket callback, before the socket exists), no redirect is followed, no proxy from the
/// environment is used, the answer's body is read but not kept beyond a few bytes, and the whole
/// request is bounded by `timeout`. Every libcurl call of the services is in this file.
///
/// Blocking, one request at a time: each sender thread owns one. Sendable only to be handed over.
public final class OutboundHTTPClient: @unchecked Sendable {
    /// The state the callbacks see, passed to libcurl as their user data.
    private final class Context {
        let policy: AddressPolicy
        var refused: String?
        var bodyBytes = 0
        init(policy: AddressPolicy) { self.policy = policy }
    }

    /// The most of an answer's body read before the transfer is cut.
    static let maxBodyBytes = 64 * 1024

    private static let initialized: Bool = curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK

    private let handle: UnsafeMutableRawPointer
    private let context: Context
    private let errorBuffer: UnsafeMutablePointer<CChar>

    public init(policy: AddressPolicy, timeout: Duration, userAgent: String = "subscriptions-webhooks/1") throws {
        guard Self.initialized, let handle = curl_easy_init() else { throw OutboundHTTPError(message: "curl_easy_init failed") }
        self.handle = handle
        context = Context(policy: policy)
        errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE))
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
        let milliseconds = max(1, Int(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000))
        // Many senders on many threads: no signals for timeouts (name lookups then use threads).
        _ = cshims_curl_setopt_long(handle, CURLOPT_NOSIGNAL, 1)
        _ = cshims_curl_setopt_long(handle, CURLOPT_TIMEOUT_MS, milliseconds)
        _ = cshims_curl_setopt_long(handle, CURLOPT_CONNECTTIMEOUT_MS, milliseconds)
        _ = cshims_curl_setopt_long(handle, CURLOPT_FOLLOWLOCATION, 0)
        _ = cshims_curl_setopt_pointer(handle, CURLOPT_PROTOCOLS_STR, policy.allowHTTP ? "http,https" : "https")
        // An empty proxy: http_proxy and friends from the environment would move the connect
        // (and the address check) to the proxy.
        _ = cshims_curl_setopt_pointer(handle, CURLOPT_PROXY, "")
        _ = cshims_curl_setopt_pointer(handle, CURLOPT_USERAGENT, userAgent)
        _ = cshims_curl_setopt_pointer(handle, CURLOPT_ERRORBUFFER, errorBuffer)
        let user = Unmanaged.passUnretained(context).toOpaque()
        _ = cshims_curl_setopt_opensocket_function(handle) { user, _, address in
            guard let user, let address else { return CURL_SOCKET_BAD }
            let context = Unmanaged<Context>.fromOpaque(user).takeUnretainedValue()
            let family = address.pointee.family
            guard let ip = IPAddress(socketAddress: UnsafeRawPointer(address).advanced(by: MemoryLayout<curl_sockaddr>.offset(of: \.addr)!)) else {
                context.refused = "address family \(family) refused"
                return CURL_SOCKET_BAD
            }
            if let range = context.policy.refusal(ip) {
                context.refused = "refused to connect to \(ip), a \(range) address (WEBHOOK_ALLOW_PRIVATE_NETWORKS is off)"
                return CURL_SOCKET_BAD
            }
            return socket(family, address.pointee.socktype, address.pointee.protocol)
        }
        _ = cshims_curl_setopt_pointer(handle, CURLOPT_OPENSOCKETDATA, user)
        // The answer's body is drained (so the connection stays usable) and dropped; past
        // `maxBodyBytes` the transfer stops (its status still counts).
        _ = cshims_curl_setopt_write_function(handle) { _, size, count, user in
            guard let user else { return 0 }
            let context = Unmanaged<Context>.fromOpaque(user).takeUnretainedValue()
            context.bodyBytes += size * count
            return context.bodyBytes > OutboundHTTPClient.maxBodyBytes ? 0 : size * count
        }
        _ = cshims_curl_setopt_pointer(handle, CURLOPT_WRITEDATA, user)
    }

    deinit {
        curl_easy_cleanup(handle)
        errorBuffer.deallocate()
    }

    /// POSTs `body` with `headers` (`Name: value` lines) to `url`; never throws: every failure is a result.
    public func post(url: String, headers: [String], body: [UInt8]) -> OutboundHTTPResult {
        context.refused = nil
        context.bodyBytes = 0
        errorBuffer[0] = 0
        var list: UnsafeMutablePointer<curl_slist>?
        // An empty Expect header: no 100-continue round trip before the body.
        for header in headers + ["Expect:"] { list = curl_slist_append(list, header) }
        defer { curl_slist_free_all(list) }
        _ = cshims_curl_setopt_pointer(handle, CURLOPT_HTTPHEADER, list)
        _ = cshims_curl_setopt_pointer(handle, CURLOPT_URL, url)
        _ = cshims_curl_setopt_long(handle, CURLOPT_POSTFIELDSIZE, body.count)
        let code = body.withUnsafeBytes { bytes in
            _ = cshims_curl_setopt_pointer(handle, CURLOPT_POSTFIELDS, bytes.baseAddress ?? UnsafeRawPointer(errorBuffer))
            let code = curl_easy_perform(handle)
            // The buffer is only valid here: never leave libcurl a pointer to it.
            _ = cshims_curl_setopt_pointer(handle, CURLOPT_POSTFIELDS, nil)
            return code
        }
        let cut = code == CURLE_WRITE_ERROR && context.bodyBytes > Self.maxBodyBytes
        guard code == CURLE_OK || cut else {
            if let refused = context.refused { return OutboundHTTPResult(statusCode: nil, error: refused) }
            let detail = String(cString: errorBuffer)
            return OutboundHTTPResult(
                statusCode: nil, error: detail.isEmpty ? String(cString: curl_easy_strerror(code)) : detail)
        }
        var status = 0
        _ = cshims_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        return OutboundHTTPResult(statusCode: status, error: nil)
    }
}

/// The client could not be made.
public struct OutboundHTTPError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { "outbound http: \(message)" }
}
