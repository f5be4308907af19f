import Foundation
import ServiceRuntime
import StrictJSON
import Synchronization

/// What is known of a request once its head has arrived, before any body byte is read.
public struct HTTPRequestHead: Sendable {
    public var method: String
    /// The path in its normalised spelling (`RequestPath`), escapes other than those of
    /// unreserved characters kept (the router decodes each segment on its own, so an encoded `/`
    /// inside a path parameter stays inside it).
    public var path: String
    /// Query arguments, decoded (the server refuses a request that repeats a name).
    public var query: [String: String]
    /// Header fields by lowercased name; repeated fields are joined with ", ".
    public var headers: [String: String]
    /// The TCP peer.
    public var remoteAddress: String
    /// Who sent the request: the peer, or the client a trusted proxy names (`ClientAddress`).
    public var clientAddress: String
    /// The client's `X-Request-Id` when it is sane, else a fresh random id; echoed in the response.
    public var traceID: String

    public init(
        method: String, path: String, query: [String: String] = [:], headers: [String: String] = [:],
        remoteAddress: String = "", clientAddress: String? = nil, traceID: String = TraceID.generate()
    ) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.remoteAddress = remoteAddress
        self.clientAddress = clientAddress ?? remoteAddress
        self.traceID = traceID
    }
}

/// A complete request as handed to a handler: head, body and the parameters of the matched route.
public struct HTTPRequest: Sendable {
    public var head: HTTPRequestHead
    public var body: [UInt8]
    public var pathParameters: [String: String]

    public init(head: HTTPRequestHead, body: [UInt8] = [], pathParameters: [String: String] = [:]) {
        self.head = head
        self.body = body
        self.pathParameters = pathParameters
    }

    public var method: String { head.method }
    public var path: String { head.path }
    public var traceID: String { head.traceID }
    /// A header field by case-insensitive name.
    public func header(_ name: String) -> String? { head.headers[name.lowercased()] }
    public func query(_ name: String) -> String? { head.query[name] }
    public func pathParameter(_ name: String) -> String? { pathParameters[name] }

    /// Decodes the body as JSON (dates as RFC 3339 strings); any failure is a 400 `MALFORMED_JSON`
    /// whose message names the offending field but never echoes a value. The syntax is checked
    /// strictly first: Foundation takes the last of duplicate names, so `{"a":1,"a":2}` could mean
    /// one thing to us and another to whoever reads the body next.
    public func decodeJSON<T: Decodable>(_ type: T.Type) throws(HTTPError) -> T {
        do {
            _ = try body.withUnsafeBufferPointer { try StrictJSON.parse($0) }
        } catch {
            let reason = (error as? StrictJSON.SyntaxError)?.reason ?? "unreadable"
            throw HTTPError(status: 400, code: "MALFORMED_JSON", message: "the request body is not valid JSON (\(reason))")
        }
        do {
            return try JSONCoding.decoder().decode(type, from: Data(body))
        } catch {
            throw HTTPError(status: 400, code: "MALFORMED_JSON", message: JSONCoding.describe(error))
        }
    }
}

/// A response to send: status, header fields in order, and the body bytes.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: [UInt8]

    /// A response whose `Content-Type` is JSON also gets `jsonHeaders` (each unless `headers`
    /// sets it already). Every response is made here, whichever handler, middleware, router
    /// fallback or server refusal made it, so no JSON answer goes out without them.
    public init(status: Int, headers: [(String, String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
        // Byte comparisons rather than Foundation's case-insensitive compare: every notification's
        // answer, the ingress's hot path, is made here.
        guard headers.contains(where: { Self.sameASCII($0.0, "content-type") && Self.isJSON($0.1) }) else { return }
        for field in Self.jsonHeaders where !headers.contains(where: { Self.sameASCII($0.0, field.0) }) {
            self.headers.append(field)
        }
    }

    /// What every JSON answer carries: JSON answers hold personal data (orders, balances, the
    /// admin lookup), which no browser or proxy may keep, and a JSON body must never be sniffed
    /// into something a browser would render.
    public static let jsonHeaders = [("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff")]

    /// `application/json`, with or without parameters, in any case.
    static func isJSON(_ contentType: String) -> Bool {
        let type = contentType.utf8.prefix { $0 != UInt8(ascii: ";") }.filter { $0 != UInt8(ascii: " ") && $0 != 0x09 }
        return sameASCII(type, "application/json".utf8)
    }

    /// Equal but for the case of ASCII letters.
    static func sameASCII(_ a: some Collection<UInt8>, _ b: some Collection<UInt8>) -> Bool {
        func lowered(_ byte: UInt8) -> UInt8 { byte >= 0x41 && byte <= 0x5A ? byte | 0x20 : byte }
        return a.count == b.count && zip(a, b).allSatisfy { lowered($0) == lowered($1) }
    }

    static func sameASCII(_ a: String, _ b: String) -> Bool { sameASCII(a.utf8, b.utf8) }

    /// The first header field with this case-insensitive name.
    public func header(_ name: String) -> String? {
        headers.first { $0.0.caseInsensitiveCompare(name) == .orderedSame }?.1
    }

    /// `value` as JSON: keys as declared (sorted, so equal values give equal bytes), dates as
    /// RFC 3339 UTC strings.
    public static func json<T: Encodable>(_ value: T, status: Int = 200) -> HTTPResponse {
        guard let body = try? JSONCoding.encoder().encode(value) else {
            return .error(status: 500, code: "INTERNAL_ERROR", message: "the response could not be encoded", traceID: "")
        }
        return HTTPResponse(status: status, headers: [("Content-Type", "application/json")], body: Array(body))
    }

    public static func text(_ s: String, status: Int = 200, contentType: String = "text/plain; charset=utf-8")
        -> HTTPResponse
    {
        HTTPResponse(status: status, headers: [("Content-Type", contentType)], body: Array(s.utf8))
    }

    /// The one error shape every endpoint returns: `{"code":…,"message":…,"traceId":…}`.
    public static func error(status: Int, code: String, message: String, traceID: String) -> HTTPResponse {
        json(ErrorBody(code: code, message: message, traceId: traceID), status: status)
    }

    private struct ErrorBody: Encodable {
        let code: String
        let message: String
        let traceId: String
    }
}

/// Request identifiers: the client's when it is safe to log and echo, else a random one.
public enum TraceID {
    /// 16 pseudo-random bytes as 32 lowercase hex digits, unique within the process.
    ///
    /// Trace ids must be unique, not secret: a counter run through a bijective mixer under a
    /// per-process random key never repeats within the process and practically never across
    /// processes, without the syscall the system RNG costs on every request.
    public static func generate() -> String {
        let n = counter.add(1, ordering: .relaxed).newValue
        return hex(mix(key.0 ^ n)) + hex(mix(key.1 &+ n))
    }

    private static let key: (UInt64, UInt64) = {
        var generator = SystemRandomNumberGenerator()
        return (generator.next(), generator.next())
    }()
    private static let counter = Atomic<UInt64>(0)

    /// The SplitMix64 finalizer: a bijection that spreads every input bit over the output.
    private static func mix(_ value: UInt64) -> UInt64 {
        var z = value &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// `candidate` when it has 1 to 64 characters from [A-Za-z0-9_-], else a generated id.
    public static func accept(_ candidate: String?) -> String {
        guard let candidate, (1...64).contains(candidate.utf8.count),
            candidate.utf8.allSatisfy({ isIDByte($0) })
        else { return generate() }
        return candidate
    }

    private static func isIDByte(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
            true
        default: false
        }
    }

    private static func hex(_ value: UInt64) -> String {
        let digits = String(value, radix: 16)
        return String(repeating: "0", count: 16 - digits.count) + digits
    }
}

/// The JSON conventions of the API, shared by requests and responses.
enum JSONCoding {
    static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(RFC3339.string(from: date))
        }
        return encoder
    }

    static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            guard let date = RFC3339.date(from: try container.decode(String.self)) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "not an RFC 3339 date")
            }
            return date
        }
        return decoder
    }

    /// A client-facing account of a decoding failure: where, never the offending value.
    static func describe(_ error: any Error) -> String {
        func path(_ context: DecodingError.Context, _ last: (any CodingKey)? = nil) -> String {
            let keys = context.codingPath + (last.map { [$0] } ?? [])
            return keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
        }
        switch error as? DecodingError {
        case .keyNotFound(let key, let context)?: return "missing field '\(path(context, key))'"
        case .valueNotFound(_, let context)?: return "field '\(path(context))' must not be null"
        case .typeMismatch(_, let context)?: return "field '\(path(context))' has the wrong type"
        case .dataCorrupted(let context)? where !context.codingPath.isEmpty:
            return "field '\(path(context))' has an invalid value"
        default: return "the request body is not valid JSON"
        }
    }
}
