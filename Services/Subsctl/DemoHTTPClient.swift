import Crypto
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

/// Client bearer tokens as the app's identity provider would mint them (HS256, `sub` = user id),
/// for local use only. The key is the secret's UTF-8 bytes, as the ingress reads it.
enum DevToken {
    static func hs256(user: String, secret: String, lifetime: TimeInterval = 3600, now: Date = Date()) -> String {
        let header = Base64URL.encode(Array(#"{"alg":"HS256","typ":"JWT"}"#.utf8))
        let claims: [String: Any] = ["sub": user, "iat": Int(now.timeIntervalSince1970), "exp": Int(now.timeIntervalSince1970 + lifetime)]
        // A dictionary of a string and integers always serialises.
        let payload = Base64URL.encode(Array(try! JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys])))
        let signature = HMACSHA256.authenticate(key: Array(secret.utf8), message: Array("\(header).\(payload)".utf8))
        return "\(header).\(payload).\(Base64URL.encode(signature))"
    }
}
