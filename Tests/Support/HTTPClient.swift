import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// A response as tests look at it.
public struct TestHTTPResponse: Sendable {
    public var status: Int
    public var headers: [String: String]
    public var body: Data
    public var text: String { String(decoding: body, as: UTF8.self) }
    public func json() throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: body) as? [String: Any] ?? [:]
    }
}

/// Minimal HTTP client for talking to a service under test on loopback.
public struct TestHTTPClient: Sendable {
    public let baseURL: URL
    private let session: URLSession

    public init(port: Int) {
        baseURL = URL(string: "http://127.0.0.1:\(port)")!
        let configuration = URLSessionConfiguration.ephemeral
        configuration.timeoutIntervalForRequest = 30
        configuration.httpMaximumConnectionsPerHost = 64
        session = URLSession(configuration: configuration)
    }

    public func request(
        _ method: String, _ path: String, headers: [String: String] = [:], body: Data? = nil
    ) async throws -> TestHTTPResponse {
        var request = URLRequest(url: URL(string: path, relativeTo: baseURL)!)
        request.httpMethod = method
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        request.httpBody = body
        let (data, response) = try await session.data(for: request)
        let http = response as! HTTPURLResponse
        var flat: [String: String] = [:]
        for (key, value) in http.allHeaderFields { flat[String(describing: key).lowercased()] = String(describing: value) }
        return TestHTTPResponse(status: http.statusCode, headers: flat, body: data)
    }

    public func get(_ path: String, headers: [String: String] = [:]) async throws -> TestHTTPResponse {
        try await request("GET", path, headers: headers)
    }

    public func post(_ path: String, json: Any, headers: [String: String] = [:]) async throws -> TestHTTPResponse {
        try await request(
            "POST", path, headers: headers.merging(["Content-Type": "application/json"]) { own, _ in own },
            body: try JSONSerialization.data(withJSONObject: json))
    }
}

/// A TCP port nobody listens on right now (the kernel's pick for port 0).
public func freeTCPPort() -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
    }
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    return Int(UInt16(bigEndian: address.sin_port))
}
