import Foundation
import HTTPServer

/// `GET /openapi.json`: the OpenAPI 3.1 document of every endpoint (`openapi.json`, a resource
/// of this module), served as stored.
struct OpenAPIRoutes: Sendable {
    static let path = "/openapi.json"
    let document: [UInt8]

    /// Reads the bundled document; a build without it is broken, so start-up fails loudly.
    init() throws {
        guard let url = Bundle.module.url(forResource: "openapi", withExtension: "json") else {
            throw OpenAPIDocumentMissing()
        }
        document = Array(try Data(contentsOf: url))
    }

    func register(in router: inout Router<IngressRequestContext>) {
        let response = HTTPResponse(status: 200, headers: [("Content-Type", "application/json")], body: document)
        router.get(Self.path) { _ in response }
    }
}

/// The resource bundle of the ingress lacks `openapi.json`.
struct OpenAPIDocumentMissing: Error, CustomStringConvertible {
    var description: String { "openapi.json is missing from the ingress resources" }
}
