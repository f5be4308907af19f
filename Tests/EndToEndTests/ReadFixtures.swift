import Foundation
import Postgres
import TestSupport

/// Rows the read endpoints show, written straight into the harness's database (the worker that
/// normally writes them is not part of these tests).
extension IngressHarness {
    /// Rows the read endpoints show, written straight into the harness's database.
    var rows: TestRows { TestRows(pool: pool, bundleID: Self.bundleID) }

    func authorized(_ userID: String) -> [String: String] { ["Authorization": "Bearer \(userToken(userID))"] }

    /// GET as `userID`, expecting a 200 JSON object.
    func read(_ path: String, as userID: String) async throws -> [String: Any] {
        let response = try await client.get(path, headers: authorized(userID))
        guard response.status == 200 else { throw UnexpectedResponse(path: path, status: response.status, body: response.text) }
        return try response.json()
    }
}
