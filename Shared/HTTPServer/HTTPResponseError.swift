/// An error that knows the HTTP answer it stands for. The router renders any such error thrown
/// by a handler or middleware through `response(traceID:)`, the one place the error body is
/// written; any other error is a 500.
public protocol HTTPResponseError: Error {
    var status: Int { get }
    /// The stable code clients key on.
    var code: String { get }
    /// For people; never carries secrets or payloads.
    var message: String { get }
    /// Header fields the answer carries besides the content type (`Allow`, `Retry-After`…).
    var headers: [(String, String)] { get }
}

extension HTTPResponseError {
    public var headers: [(String, String)] { [] }

    /// The error as sent: `status`, the JSON error body `{"code":…,"message":…,"traceId":…}`, `headers`.
    public func response(traceID: String) -> HTTPResponse {
        var response = HTTPResponse.error(status: status, code: code, message: message, traceID: traceID)
        response.headers.append(contentsOf: headers)
        return response
    }
}

/// A failure a handler reports to its client as `status` with a JSON error body carrying `code`.
public struct HTTPError: HTTPResponseError, Sendable, CustomStringConvertible {
    public var status: Int
    public var code: String
    public var message: String
    public var headers: [(String, String)]

    public init(status: Int, code: String, message: String, headers: [(String, String)] = []) {
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
    }

    public var description: String { "HTTP \(status) \(code): \(message)" }
}
