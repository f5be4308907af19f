import Foundation
import HTTPServer
import ServiceRuntime
import TestSupport

/// A socket failure seen by the test client, with the errno that explains it.
struct SocketError: Error, CustomStringConvertible {
    let operation: String
    let code: Int32
    var description: String { "\(operation) failed: \(String(cString: strerror(code)))" }
}

/// A response as read off the wire.
struct RawResponse {
    let status: Int
    /// By lowercased name.
    let headers: [String: String]
    let body: [UInt8]

    var text: String { String(decoding: body, as: UTF8.self) }

    /// The `code` of a JSON error body.
    var errorCode: String? {
        (try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any])?["code"] as? String
    }
}

/// A blocking HTTP/1.1 client on one TCP connection, with a receive timeout so a broken server
/// fails a test instead of hanging it. Not thread-safe: use each one inside a single `blocking`.
final class RawConnection {
    private let fd: Int32
    private var pending: [UInt8] = []

    /// `source` (another loopback address, 127.0.0.2…) makes the connection come from elsewhere.
    init(port: Int, timeoutSeconds: Int = 10, source: String? = nil) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw SocketError(operation: "socket", code: errno) }
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = inet_addr(source)
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            // Not closed here: deinit closes it (closing twice could close a descriptor another
            // thread, the server's included, has been given meanwhile).
            if bound != 0 { throw SocketError(operation: "bind", code: errno) }
        }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        if result != 0 { throw SocketError(operation: "connect", code: errno) }
    }

    deinit { close(fd) }

    func send(_ text: String) throws { try send(Array(text.utf8)) }

    func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Foundation.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw SocketError(operation: "send", code: errno) }
            offset += n
        }
    }

    /// Sends a request with Host and (when there is a body) Content-Length.
    func request(_ method: String, _ path: String, headers: [String: String] = [:], body: String = "") throws {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: test\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        if !body.isEmpty { head += "Content-Length: \(body.utf8.count)\r\n" }
        try send(head + "\r\n" + body)
    }

    func readResponse() throws -> RawResponse {
        let headEnd = Array("\r\n\r\n".utf8)
        while true {
            if let range = pending.firstRange(of: headEnd) {
                let head = String(decoding: pending[..<range.lowerBound], as: UTF8.self)
                pending.removeSubrange(..<range.upperBound)
                let lines = head.components(separatedBy: "\r\n")
                let statusParts = lines[0].split(separator: " ")
                guard statusParts.count >= 2, let status = Int(statusParts[1]) else {
                    throw SocketError(operation: "parse status line '\(lines[0])'", code: EPROTO)
                }
                var headers: [String: String] = [:]
                for line in lines.dropFirst() {
                    guard let colon = line.firstIndex(of: ":") else { continue }
                    headers[line[..<colon].lowercased()] = line[line.index(after: colon)...]
                        .trimmingCharacters(in: .whitespaces)
                }
                let length = headers["content-length"].flatMap { Int($0) } ?? 0
                while pending.count < length {
                    guard try fill() else { throw SocketError(operation: "read body", code: ECONNRESET) }
                }
                let body = Array(pending.prefix(length))
                pending.removeFirst(length)
                return RawResponse(status: status, headers: headers, body: body)
            }
            guard try fill() else { throw SocketError(operation: "read response", code: ECONNRESET) }
        }
    }

    /// Every response the server sends until it closes the connection (a status line and headers
    /// sent twice count as two); nil when the connection is still open at the receive timeout.
    /// Bytes after the last response that are not a whole response fail the read.
    func responsesUntilClose() throws -> [RawResponse]? {
        var responses: [RawResponse] = []
        while true {
            do {
                responses.append(try readResponse())
            } catch let error as SocketError where error.code == ECONNRESET {
                guard pending.isEmpty else {
                    throw SocketError(operation: "parse \(pending.count) bytes after the last response", code: EPROTO)
                }
                return responses
            } catch let error as SocketError where error.code == EAGAIN || error.code == EWOULDBLOCK {
                return nil
            }
        }
    }

    /// Reads until the server closes the connection; true when it did (EOF or reset) before the
    /// receive timeout.
    func waitForClose() throws -> Bool {
        pending.removeAll()
        do {
            while try fill() { pending.removeAll() }
            return true
        } catch let error as SocketError where error.code == ECONNRESET {
            return true
        } catch let error as SocketError where error.code == EAGAIN || error.code == EWOULDBLOCK {
            return false
        }
    }

    /// One read into `pending`; false on end of stream.
    private func fill() throws -> Bool {
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 {
                pending.append(contentsOf: chunk[..<n])
                return true
            }
            if n == 0 { return false }
            if errno == EINTR { continue }
            throw SocketError(operation: "recv", code: errno)
        }
    }
}

/// Starts a server on 127.0.0.1 with an ephemeral port, runs `body`, and always shuts it down.
func withServer<Context>(
    _ router: Router<Context>, logger: Logger = Logger(label: "test", level: .error, sink: .memory()),
    admission: (@Sendable (HTTPRequestHead) -> HTTPResponse?)? = nil,
    configure: (inout HTTPServerConfiguration) -> Void = { _ in },
    _ body: (HTTPServer) async throws -> Void
) async throws {
    var configuration = HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 2)
    configure(&configuration)
    let server = HTTPServer(configuration: configuration, router: router, logger: logger, admission: admission)
    try await blocking { try server.start() }
    do {
        try await body(server)
    } catch {
        await server.shutdown()
        throw error
    }
    await server.shutdown()
}
