import Crypto
import Foundation
import HTTPServer

/// Where the next page of one user's list starts: after the row with this sort position and id.
///
/// Lists are ordered by (position, id) descending, so rows that share a position (a batch of
/// grants written in one transaction) are neither repeated nor skipped across pages.
struct PageCursor: Sendable, Equatable, Codable {
    /// Format version, so a future layout can refuse old cursors explicitly.
    var version: Int = 1
    /// The list it was issued for (`grants`, `daily-bills`): a cursor of one list is refused by another.
    var list: String
    /// The user it was issued to: a cursor handed to someone else is refused.
    var userID: String
    /// The sort key of the last row returned (microseconds since 1970 for times, days for dates).
    var position: Int64
    var id: Int64

    enum CodingKeys: String, CodingKey {
        case version = "v"
        case list = "l"
        case userID = "u"
        case position = "p"
        case id = "i"
    }
}

extension APIError {
    static func invalidCursor() -> HTTPError {
        HTTPError(status: 400, code: "INVALID_CURSOR", message: "the cursor is not one this list issued to you; restart without it")
    }
}

/// Issues and checks opaque cursors: `base64url(payload) "." base64url(HMAC-SHA256(key, payload))`.
///
/// The MAC makes a cursor tamper-evident, so a client cannot page through another user's rows or
/// craft a position; the payload is not secret (it holds only the caller's own ids).
struct PageCursorSigner: Sendable {
    private let key: [UInt8]
    /// Longer input is refused before any decoding work.
    static let maxLength = 512

    init(key: [UInt8]) { self.key = key }

    func sign(_ cursor: PageCursor) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        // Encoding a struct of strings and integers cannot fail.
        let payload = Array(try! encoder.encode(cursor))
        return Base64URL.encode(payload) + "." + Base64URL.encode(HMACSHA256.authenticate(key: key, message: payload))
    }

    /// The cursor, if it is intact, current and was issued for this list and user.
    func verify(_ text: String, list: String, userID: String) throws(HTTPError) -> PageCursor {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard text.utf8.count <= Self.maxLength, parts.count == 2, let payload = Base64URL.decode(parts[0]),
            let mac = Base64URL.decode(parts[1]),
            constantTimeEquals(HMACSHA256.authenticate(key: key, message: payload), mac),
            let cursor = try? JSONDecoder().decode(PageCursor.self, from: Data(payload)),
            cursor.version == 1, cursor.list == list, cursor.userID == userID
        else { throw APIError.invalidCursor() }
        return cursor
    }
}

/// The paging arguments of a list request: `limit` (default 20, capped at 100) and `cursor`.
struct PageRequest: Sendable {
    static let defaultLimit = 20
    static let maxLimit = 100

    let limit: Int
    /// Nil for the first page.
    let after: PageCursor?

    init(_ request: HTTPRequest, list: String, userID: String, cursors: PageCursorSigner) throws(HTTPError) {
        switch request.query("limit") {
        case nil, "": limit = Self.defaultLimit
        case let text?:
            guard text.utf8.count <= 9, let value = Int(text), value >= 1 else {
                throw APIError.invalidRequest("limit must be a whole number from 1 (at most \(Self.maxLimit) are returned)")
            }
            limit = min(value, Self.maxLimit)
        }
        switch request.query("cursor") {
        case nil, "": after = nil
        case let text?: after = try cursors.verify(text, list: list, userID: userID)
        }
    }
}

/// One page of a list: `{"items": […], "nextCursor": "…" | null}`.
struct Page<Item: Encodable & Sendable>: Encodable, Sendable {
    let items: [Item]
    /// Null on the last page (written out, so clients see the key either way).
    let nextCursor: String?

    /// `rows` holds up to `limit + 1` rows (ordered as the list is): the extra one only tells
    /// that another page exists.
    init<Row>(rows: [Row], limit: Int, item: (Row) -> Item, cursor: (Row) -> PageCursor, signer: PageCursorSigner) {
        let page = rows.prefix(limit)
        items = page.map(item)
        nextCursor = rows.count > limit ? page.last.map { signer.sign(cursor($0)) } : nil
    }

    enum CodingKeys: String, CodingKey { case items, nextCursor }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(items, forKey: .items)
        try container.encode(nextCursor, forKey: .nextCursor)
    }
}
