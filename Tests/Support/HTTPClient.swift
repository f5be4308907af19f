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
        try await send("POST", path, json: json, headers: headers)
    }

    /// A request with a JSON body.
    public func send(_ method: String, _ path: String, json: Any, headers: [String: String] = [:]) async throws
        -> TestHTTPResponse
    {
        try await request(
            method, path, headers: headers.merging(["Content-Type": "application/json"]) { own, _ in own },
            body: try JSONSerialization.data(withJSONObject: json))
    }
}

/// A loopback TCP port nobody listens on right now, for services that must keep their port across
/// restarts. It is drawn below the kernel's ephemeral range (32768+), so no outgoing connection of
/// this or another test can take it between the choice and the service's bind.
public func freeTCPPort() -> Int {
    for _ in 0..<200 {
        let port = Int.random(in: 20_000..<32_000)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        close(fd)
        if bound { return port }
    }
    fatalError("no free loopback port in 20000..<32000")
}
