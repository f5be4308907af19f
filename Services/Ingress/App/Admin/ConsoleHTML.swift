import Foundation
import HTTPServer
import ServiceRuntime

/// HTML of the support console: every value goes through `escape`, pages carry no script and no
/// external asset, and forms carry the session's CSRF token.
enum ConsoleHTML {
    /// `text` safe inside element content and quoted attribute values.
    static func escape(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for character in text {
            switch character {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(character)
            }
        }
        return out
    }

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

    static let style = """
        body{font-family:system-ui,sans-serif;margin:0;color:#222}header{background:#234;color:#fff;padding:.6em 1em;display:flex;gap:1.5em;align-items:center}
        header a{color:#fff}header form{margin-left:auto}main{padding:1em}table{border-collapse:collapse;margin:.5em 0}
        td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top;font-size:.9em}th{background:#eee}
        .DEAD,.error{color:#a00;font-weight:bold}.SUCCEEDED,.ok{color:#070}pre{background:#f6f6f6;padding:.5em;overflow:auto;max-width:60em}
        fieldset{margin:.5em 0;border:1px solid #ccc}input[type=text],input[type=password]{width:28em}.top{display:flex;gap:2em;flex-wrap:wrap}
        """

    /// A whole page; `principal` nil for the sign-in page (no navigation).
    static func page(
        title: String, principal: AdminPrincipal?, csrf: String?, status: Int = 200, extraHeaders: [(String, String)] = [],
        _ body: String
    ) -> HTTPResponse {
        var html = """
            <!doctype html><html lang="en"><head><meta charset="utf-8"><title>\(escape(title)) – support console</title>
            <style>\(style)</style></head><body><header><strong>Support console</strong>
            """
        if let principal, let csrf {
            html += """
                <a href="/admin/">Search</a><a href="/admin/queue">Queue</a>
                <span>signed in as \(escape(principal.name)) (\(principal.role.rawValue))</span>
                <form method="post" action="/admin/logout">\(csrfField(csrf))<button type="submit" id="sign-out">Sign out</button></form>
                """
        }
        html += "</header><main><h1>\(escape(title))</h1>\(body)</main></body></html>"
        return HTTPResponse(status: status, headers: headers + extraHeaders, body: Array(html.utf8))
    }

    static func csrfField(_ csrf: String) -> String { "<input type=\"hidden\" name=\"csrf\" value=\"\(escape(csrf))\">" }

    static func redirect(_ location: String, extraHeaders: [(String, String)] = []) -> HTTPResponse {
        HTTPResponse(status: 303, headers: [("Location", location), ("Cache-Control", "no-store")] + extraHeaders)
    }

    /// A table of rows already escaped cell by cell.
    static func table(_ head: [String], _ rows: [[String]], id: String? = nil) -> String {
        guard !rows.isEmpty else { return "<p\(id.map { " id=\"\(escape($0))\"" } ?? "")>none</p>" }
        var html = "<table\(id.map { " id=\"\(escape($0))\"" } ?? "")><tr>" + head.map { "<th>\(escape($0))</th>" }.joined() + "</tr>"
        for row in rows { html += "<tr>" + row.map { "<td>\($0)</td>" }.joined() + "</tr>" }
        return html + "</table>"
    }

    /// A decoded value, opened on demand (no script: `<details>`).
    static func details(_ label: String, json: String) -> String {
        "<details><summary>\(escape(label))</summary><pre>\(escape(json))</pre></details>"
    }

    /// An action form: its fields, a required reason; posting it shows a confirmation page first.
    static func actionForm(
        _ action: String, title: String, csrf: String, hidden: [String: String], inputs: [(name: String, label: String)] = []
    ) -> String {
        var html = "<form method=\"post\" action=\"/admin/actions/\(escape(action))\"><fieldset><legend>\(escape(title))</legend>"
        html += csrfField(csrf)
        for (name, value) in hidden.sorted(by: { $0.key < $1.key }) {
            html += "<input type=\"hidden\" name=\"\(escape(name))\" value=\"\(escape(value))\">"
        }
        for input in inputs {
            html += "<label>\(escape(input.label)) <input type=\"text\" name=\"\(escape(input.name))\" required></label> "
        }
        html += "<label>Reason <input type=\"text\" name=\"reason\" required maxlength=\"1000\"></label> "
        html += "<button type=\"submit\">\(escape(title))…</button></fieldset></form>"
        return html
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
