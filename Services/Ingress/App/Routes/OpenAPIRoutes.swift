import Foundation
import HTTPServer

/// `GET /openapi.json`: the OpenAPI 3.1 document of every endpoint (`openapi.json`, a resource
/// of this module), served as stored; the admin listener serves `admin-openapi.json` the same way
/// at `/admin/openapi.json`.
struct OpenAPIRoutes: Sendable {
    static let path = "/openapi.json"
    let path: String
    let document: [UInt8]

    /// Reads the bundled document; a build without it is broken, so start-up fails loudly.
    init(resource: String = "openapi", path: String = Self.path) throws {
        guard let url = Bundle.module.url(forResource: resource, withExtension: "json") else {
            throw OpenAPIDocumentMissing(resource: resource)
        }
        self.path = path
        document = Array(try Data(contentsOf: url))
    }

    func register<Context: RequestContext>(in router: inout Router<Context>) {
        let response = HTTPResponse(status: 200, headers: [("Content-Type", "application/json")], body: document)
        router.get(path) { _ in response }
    }
}

/// The resource bundle of the ingress lacks `openapi.json`.
struct OpenAPIDocumentMissing: Error, CustomStringConvertible {
    var resource = "openapi"
    var description: String { "\(resource).json is missing from the ingress resources" }
}
