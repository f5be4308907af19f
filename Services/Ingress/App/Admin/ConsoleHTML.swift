import Foundation
import HTTPServer
import ServiceRuntime

/// A fragment of HTML. Interpolating a string escapes it, and that is the only escaping the
/// console does; only another `HTML` (markup built the same way) goes in as it is, so no value can
/// reach a page unescaped by being forgotten.
struct HTML: ExpressibleByStringInterpolation, Sendable {
    fileprivate(set) var markup: String

    init(stringLiteral markup: String) { self.markup = markup }
    init(stringInterpolation: Interpolation) { markup = stringInterpolation.markup }
    /// `text` as content or a quoted attribute value.
    init(_ text: String) { self = "\(text)" }

    struct Interpolation: StringInterpolationProtocol {
        fileprivate var markup = ""

        init(literalCapacity: Int, interpolationCount: Int) { markup.reserveCapacity(literalCapacity) }
        mutating func appendLiteral(_ literal: String) { markup += literal }
        mutating func appendInterpolation(_ html: HTML) { markup += html.markup }
        mutating func appendInterpolation(_ text: String) {
            for character in text {
                switch character {
                case "&": markup += "&amp;"
                case "<": markup += "&lt;"
                case ">": markup += "&gt;"
                case "\"": markup += "&quot;"
                case "'": markup += "&#39;"
                default: markup.append(character)
                }
            }
        }
    }

    static func + (lhs: HTML, rhs: HTML) -> HTML { HTML(stringLiteral: lhs.markup + rhs.markup) }
    static func += (lhs: inout HTML, rhs: HTML) { lhs.markup += rhs.markup }
}

extension Sequence<HTML> {
    func joined(separator: HTML = "") -> HTML { HTML(stringLiteral: map(\.markup).joined(separator: separator.markup)) }
}

/// The console's rendering functions: pages carry no script and no external asset, and forms
/// that post carry the session's CSRF token.
enum ConsoleHTML {
    static func time(_ date: Date?) -> String { date.map { RFC3339.string(from: $0) } ?? "–" }

    /// No script may run, nothing is loaded from elsewhere, no other site may frame or post into it.
    static let headers: [(String, String)] = [
        ("Content-Type", "text/html; charset=utf-8"),
        (
            "Content-Security-Policy",
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        ),
        ("X-Frame-Options", "DENY"), ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer"),
        ("Cache-Control", "no-store"),
    ]

    static let style: HTML = """
        body{font-family:system-ui,sans-serif;margin:0;color:#222}header{background:#234;color:#fff;padding:.6em 1em;display:flex;gap:1.5em;align-items:center}
        header a{color:#fff}header form{margin-left:auto}main{padding:1em}table{border-collapse:collapse;margin:.5em 0}
        td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top;font-size:.9em}th{background:#eee}
        .DEAD,.error{color:#a00;font-weight:bold}.SUCCEEDED,.ok{color:#070}pre{background:#f6f6f6;padding:.5em;overflow:auto;max-width:60em}
        fieldset{margin:.5em 0;border:1px solid #ccc}input[type=text],input[type=password]{width:28em}.top{display:flex;gap:2em;flex-wrap:wrap}
        """

    /// A whole page; `principal` nil for the sign-in page (no navigation).
    static func page(
        title: String, principal: AdminPrincipal?, csrf: String?, status: Int = 200, extraHeaders: [(String, String)] = [],
        _ body: HTML
    ) -> HTTPResponse {
        var html: HTML = """
            <!doctype html><html lang="en"><head><meta charset="utf-8"><title>\(title) – support console</title>
            <style>\(style)</style></head><body><header><strong>Support console</strong>
            """
        if let principal, let csrf {
            html += """
                <a href="/admin/">Search</a><a href="/admin/queue">Queue</a><a href="/admin/webhooks">Webhooks</a>
                <span>signed in as \(principal.name) (\(principal.role.rawValue))</span>
                \(postForm("/admin/logout", csrf: csrf, "<button type=\"submit\" id=\"sign-out\">Sign out</button>"))
                """
        }
        html += "</header><main><h1>\(title)</h1>\(body)</main></body></html>"
        return HTTPResponse(status: status, headers: headers + extraHeaders, body: Array(html.markup.utf8))
    }

    static func redirect(_ location: String, extraHeaders: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: 303, headers: [("Location", location), ("Cache-Control", "no-store")] + extraHeaders)
    }

    /// A section of a page under its heading.
    static func section(_ title: String, id: String? = nil, _ content: HTML) -> HTML {
        "<section\(idAttribute(id))><h2>\(title)</h2>\(content)</section>"
    }

    /// A table of rows whose cells are already markup; "none" when there are no rows.
    static func table(_ head: [String], _ rows: [[HTML]], id: String? = nil) -> HTML {
        guard !rows.isEmpty else { return "<p\(idAttribute(id))>none</p>" }
        let header = head.map { "<th>\($0)</th>" as HTML }.joined()
        let body = rows.map { row in "<tr>\(row.map { "<td>\($0)</td>" as HTML }.joined())</tr>" as HTML }.joined()
        return "<table\(idAttribute(id))><tr>\(header)</tr>\(body)</table>"
    }

    private static func idAttribute(_ id: String?) -> HTML { id.map { " id=\"\($0)\"" } ?? "" }

    /// A decoded value, opened on demand (no script: `<details>`).
    static func details(_ label: String, json: String) -> HTML {
        "<details><summary>\(label)</summary><pre>\(json)</pre></details>"
    }

    static func hiddenField(_ name: String, _ value: String) -> HTML { "<input type=\"hidden\" name=\"\(name)\" value=\"\(value)\">" }

    /// A form that posts to `action` with the token the session (or the sign-in) checks.
    static func postForm(_ action: String, csrf: String, _ content: HTML) -> HTML {
        "<form method=\"post\" action=\"\(action)\">\(hiddenField("csrf", csrf))\(content)</form>"
    }

    /// An action form: its fields (`optional` ones may stay empty), a required reason unless the
    /// action takes none; posting it shows a confirmation page first.
    static func actionForm(
        _ action: String, title: String, csrf: String, hidden: [String: String], inputs: [(name: String, label: String)] = [],
        optional: [(name: String, label: String)] = [], reason: Bool = true
    ) -> HTML {
        let fields = hidden.sorted { $0.key < $1.key }.map { hiddenField($0.key, $0.value) }.joined()
        let labelled = inputs.map { "<label>\($0.label) <input type=\"text\" name=\"\($0.name)\" required></label> " as HTML }.joined()
        let free = optional.map { "<label>\($0.label) <input type=\"text\" name=\"\($0.name)\"></label> " as HTML }.joined()
        let why: HTML = reason ? "<label>Reason <input type=\"text\" name=\"reason\" required maxlength=\"1000\"></label> " : ""
        return postForm(
            "/admin/actions/\(action)", csrf: csrf,
            "<fieldset><legend>\(title)</legend>\(fields)\(labelled)\(free)\(why)<button type=\"submit\">\(title)…</button></fieldset>")
    }

    /// `text` as one path segment or query value: all but RFC 3986's unreserved characters escaped.
    static func urlComponent(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? ""
    }

    /// The path of the case of `q` (any id the search takes).
    static func caseHref(_ q: String) -> String { "/admin/case?q=" + urlComponent(q) }

    /// The path of a webhook endpoint's page, its deliveries optionally of one status.
    static func webhookHref(_ id: String, status: String? = nil) -> String {
        "/admin/webhooks/\(urlComponent(id))" + (status.map { "?status=" + urlComponent($0) } ?? "")
    }

    /// A delivery's last answer in words: the status code and the error, either of which may be missing.
    static func lastAnswer(statusCode: Int?, error: String?) -> String {
        let parts = [statusCode.map { String($0) }, error].compactMap { $0 }
        return parts.isEmpty ? "–" : parts.joined(separator: ": ")
    }
}

/// `application/x-www-form-urlencoded` bodies and `Cookie` headers.
enum FormData {
    static func parse(_ text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let decode = { (s: Substring) in
                let spaced = s.replacingOccurrences(of: "+", with: " ")
                return spaced.removingPercentEncoding ?? spaced
            }
            let name = decode(parts[0])
            if fields[name] == nil { fields[name] = parts.count > 1 ? decode(parts[1]) : "" }
        }
        return fields
    }

    static func cookies(_ request: HTTPRequest) -> [String: String] {
        var cookies: [String: String] = [:]
        for part in (request.header("cookie") ?? "").split(separator: ";") {
            let pair = part.split(separator: "=", maxSplits: 1)
            guard pair.count == 2 else { continue }
            let name = pair[0].trimmingCharacters(in: .whitespaces)
            if cookies[name] == nil { cookies[name] = pair[1].trimmingCharacters(in: .whitespaces) }
        }
        return cookies
    }
}
