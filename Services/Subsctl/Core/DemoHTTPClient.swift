import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The demo's side of HTTP: JSON requests to the ingress, answers of any status returned, only
/// transport failures thrown.
struct DemoHTTPClient: Sendable {
    /// One answer; `json` is empty when the body is not a JSON object.
    struct Response {
        let status: Int
        let body: Data
        var text: String { String(decoding: body, as: UTF8.self) }
        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] ?? [:] }

        /// A top-level field for display, "?" when absent.
        func string(_ key: String) -> String { json[key].map { "\($0)" } ?? "?" }
    }

    let baseURL: URL
    private let session: URLSession

    init(baseURL: URL) {
        self.baseURL = baseURL
        let configuration = URLSessionConfiguration.ephemeral
        // Above the ingress's own bounded waits (INGRESS_FULFILLMENT_WAIT_MS at most 60 s).
        configuration.timeoutIntervalForRequest = 90
        session = URLSession(configuration: configuration)
    }

    func send(_ method: String, _ path: String, json: [String: String]? = nil, bearer: String? = nil) async throws(DemoFailure)
        -> Response
    {
        var request = URLRequest(url: baseURL.appendingPathComponent(path))
        request.httpMethod = method
        if let json {
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = try? JSONSerialization.data(withJSONObject: json)
        }
        if let bearer { request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
        do {
            let (data, response) = try await session.data(for: request)
            return Response(status: (response as? HTTPURLResponse)?.statusCode ?? 0, body: data)
        } catch {
            throw DemoFailure(
                description: "\(method) \(path) on \(baseURL.absoluteString) failed: \(error.localizedDescription)",
                status: ExitStatus.temporaryFailure)
        }
    }
}
