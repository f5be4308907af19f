import Foundation
import IngressApp
import Kafka
import Postgres
import ServiceRuntime
import TestSupport
import Testing

/// The OpenAPI document: served as stored, complete (every route the ingress registers), and
/// true (what the live endpoints answer matches the statuses and schemas it documents).
@Suite(.timeLimit(.minutes(3)))
struct OpenAPIDocumentTests {
    static let methods = ["get", "post", "put", "delete", "patch"]

    static func document(_ name: String = "openapi.json") throws -> [String: Any] {
        let url = ServiceProcess.packageRoot.appendingPathComponent("Services/Ingress/App/\(name)")
        return try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any])
    }

    static func operations(_ document: [String: Any]) -> [String: [String: Any]] {
        var operations: [String: [String: Any]] = [:]
        for (path, item) in (document["paths"] as? [String: [String: Any]]) ?? [:] {
            for method in methods { if let operation = item[method] as? [String: Any] { operations["\(method.uppercased()) \(path)"] = operation } }
        }
        return operations
    }

    /// A reader of either document sees what each operation takes and answers: every JSON request
    /// body and every 2xx JSON answer carries an example (`example`, or `examples` values) that
    /// its own schema accepts.
    @Test(arguments: ["openapi.json", "admin-openapi.json"])
    func everyJSONBodyAndSuccessHasAnExampleItsSchemaAccepts(name: String) throws {
        let document = try Self.document(name)
        // The examples as typed JSON: booleans and numbers stay apart for the validator.
        let url = ServiceProcess.packageRoot.appendingPathComponent("Services/Ingress/App/\(name)")
        let typed = try JSONDecoder().decode(JSONValue.self, from: Data(contentsOf: url))
        let validator = SchemaValidator(document: document)
        var checked = 0
        for (operationName, operation) in Self.operations(document).sorted(by: { $0.key < $1.key }) {
            let parts = operationName.split(separator: " ", maxSplits: 1).map(String.init)
            let typedOperation = typed["paths"]?[parts[1]]?[parts[0].lowercased()]
            var bodies: [(part: String, keys: [String])] = [("request body", ["requestBody"])]
            for status in (operation["responses"] as? [String: Any] ?? [:]).keys where status.hasPrefix("2") {
                bodies.append((status, ["responses", status]))
            }
            for (part, keys) in bodies {
                let media = keys.reduce(operation as Any?) { ($0 as? [String: Any])?[$1] }
                guard let json = ((media as? [String: Any])?["content"] as? [String: Any])?["application/json"] as? [String: Any]
                else { continue }
                let typedMedia = keys.reduce(typedOperation) { $0?[$1] }?["content"]?["application/json"]
                var examples = typedMedia?["example"].map { [$0] } ?? []
                if case .object(let named)? = typedMedia?["examples"] { examples += named.values.compactMap { $0["value"] } }
                checked += 1
                #expect(!examples.isEmpty, "\(name): \(operationName) \(part) has no example")
                for example in examples {
                    let problems = validator.validate(example, against: json["schema"] as Any, at: "example")
                    #expect(problems.isEmpty, "\(name): \(operationName) \(part): \(problems)")
                }
            }
        }
        #expect(checked >= 10, "\(name): the walk found the operations' JSON bodies")
    }

    @Test func isServedWellFormedAndListsEveryRoute() async throws {
        try await IngressHarness.with { harness in
            let served = try await harness.client.get("/openapi.json")
            #expect(served.status == 200)
            #expect(served.headers["content-type"] == "application/json")
            let stored = try Data(contentsOf: ServiceProcess.packageRoot.appendingPathComponent("Services/Ingress/App/openapi.json"))
            #expect(served.body == stored, "the served document is the one in the repository")

            let document = try Self.document()
            #expect(document["openapi"] as? String == "3.1.0")
            let components = try #require(document["components"] as? [String: Any])
            let bearer = (components["securitySchemes"] as? [String: Any])?["bearerAuth"] as? [String: Any]
            #expect(bearer?["type"] as? String == "http" && bearer?["scheme"] as? String == "bearer")
            // Every reference resolves.
            var references: [String] = []
            func collect(_ value: Any) {
                if let object = value as? [String: Any] {
                    if let reference = object["$ref"] as? String { references.append(reference) }
                    object.values.forEach(collect)
                } else if let array = value as? [Any] {
                    array.forEach(collect)
                }
            }
            collect(document)
            #expect(!references.isEmpty)
            for reference in Set(references) { #expect(SchemaValidator(document: document).resolve(reference) != nil, "\(reference)") }
            // Unique operation ids, a response for each, and the error schema on every 4xx/5xx.
            let operations = Self.operations(document)
            let ids = operations.values.compactMap { $0["operationId"] as? String }
            #expect(ids.count == operations.count && Set(ids).count == ids.count)
            for (name, operation) in operations {
                let responses = try #require(operation["responses"] as? [String: Any], "\(name)")
                #expect(!responses.isEmpty, "\(name)")
            }

            // The routes the real application registers, read from an instance built with the
            // harness's configuration (never started).
            let configuration = try IngressConfiguration.load(
                environment: ProcessInfo.processInfo.environment.merging(harness.environment) { _, new in new })
            let application = try IngressApplication(configuration: configuration, logger: Logger(label: "e2e", level: .warning))
            let registered = Set(application.routes.map { "\($0.method) \($0.pattern)" })
            await application.producer.shutdown()
            await application.pool.shutdown()
            #expect(registered.count >= 11)
            let undocumented = registered.subtracting(operations.keys)
            #expect(undocumented.isEmpty, "routes missing from openapi.json: \(undocumented.sorted())")
            let unserved = Set(operations.keys).subtracting(registered)
            #expect(unserved.isEmpty, "documented but not served: \(unserved.sorted())")
        }
    }

    @Test func liveAnswersMatchTheDocumentedStatusesAndSchemas() async throws {
        try await IngressHarness.with { harness in
            try await harness.rows.applyDemoCatalogue()
            try await harness.rows.addSubscription(
                user: "u1", product: "com.example.pro.monthly", status: "ACTIVE", expiresAt: wholeSeconds(86_400),
                pendingProduct: "com.example.starter.monthly")
            try await harness.rows.addSubscription(
                user: "u1", product: "com.example.starter.monthly", status: "EXPIRED", expiresAt: wholeSeconds(-86_400))
            try await harness.pool.query(
                PostgresQuery(
                    unsafeSQL: """
                        INSERT INTO credit_account (user_id, pool, balance) VALUES ('u1', 'SUBSCRIPTION', 2500000), ('u1', 'WELCOME', 10);
                        INSERT INTO credit_grant (grant_key, user_id, pool, amount, reason, transaction_id)
                            SELECT 'g' || n, 'u1', 'SUBSCRIPTION', 1000000, 'RENEWAL', CASE WHEN n % 2 = 0 THEN 't' || n END FROM generate_series(1, 3) n;
                        INSERT INTO credit_daily_bill (user_id, day, total_cost, closed_at) VALUES ('u1', '2026-01-01', 5, now()), ('u1', '2026-01-02', 7, NULL);
                        """))
            let document = try Self.document()
            let validator = SchemaValidator(document: document)
            let operations = Self.operations(document)
            var checked = 0
            /// The answer's status must be documented for the operation, and its body must match the schema documented for that status.
            func check(_ name: String, _ attempt: String, _ response: TestHTTPResponse) throws {
                let responses = try #require(operations[name]?["responses"] as? [String: Any], "\(name)")
                let documented = validator.resolve(responses[String(response.status)]) as? [String: Any]
                #expect(documented != nil, "\(name) (\(attempt)) answered undocumented \(response.status): \(response.text)")
                checked += 1
                guard let documented, let content = documented["content"] as? [String: Any] else { return }
                let type = response.headers["content-type"]?.split(separator: ";").first.map(String.init) ?? ""
                let media = try #require(content[type] as? [String: Any], "\(name) (\(attempt)): undocumented content type \(type)")
                guard type == "application/json", let schema = media["schema"] else { return }
                let body = try JSONDecoder().decode(JSONValue.self, from: response.body)
                let problems = validator.validate(body, against: schema, at: "body")
                #expect(problems.isEmpty, "\(name) (\(attempt)) \(response.status): \(problems)")
            }
            // Every operation: without a token, with one, and list pages with and without a valid cursor.
            for (name, operation) in operations.sorted(by: { $0.key < $1.key }) {
                let parts = name.split(separator: " ", maxSplits: 1).map(String.init)
                let path = parts[1].replacingOccurrences(of: "{orderNo}", with: "UNKNOWN-ORDER")
                let secured = !((operation["security"] as? [Any])?.isEmpty ?? false)
                var attempts: [(String, String, [String: String])] = [("no token", path, [:])]
                if secured { attempts.append(("token", path, harness.authorized("u1"))) }
                if path.hasSuffix("/grants") || path.hasSuffix("/daily-bills") {
                    attempts.append(("bad cursor", path + "?cursor=abc", harness.authorized("u1")))
                    attempts.append(("page", path + "?limit=1", harness.authorized("u1")))
                    attempts.append(("bad limit", path + "?limit=0", harness.authorized("u1")))
                }
                for (attempt, target, headers) in attempts {
                    let response =
                        parts[0] == "GET"
                        ? try await harness.client.get(target, headers: headers)
                        : try await harness.client.send(parts[0], target, json: [String: String](), headers: headers)
                    try check(name, attempt, response)
                }
            }
            // The order lifecycle's successful answers (u3 has no plan yet).
            let create = "POST /api/v1/subscriptions/orders"
            let body = ["productId": "com.example.pro.yearly", "requestId": "r1"]
            let created = try await harness.client.post("/api/v1/subscriptions/orders", json: body, headers: harness.authorized("u3"))
            #expect(created.status == 201, "\(created.text)")
            try check(create, "new", created)
            try check(create, "again", try await harness.client.post("/api/v1/subscriptions/orders", json: body, headers: harness.authorized("u3")))
            // For u1, on pro monthly, the yearly plan is a change Apple defers to the renewal: no order.
            let deferred = try await harness.client.post("/api/v1/subscriptions/orders", json: body, headers: harness.authorized("u1"))
            #expect(try deferred.json()["code"] as? String == "CHANGE_DEFERRED", "\(deferred.text)")
            try check(create, "deferred change", deferred)
            let orderNo = try #require(try created.json()["orderNo"] as? String)
            try check(
                "GET /api/v1/subscriptions/orders/{orderNo}", "own",
                try await harness.client.get("/api/v1/subscriptions/orders/\(orderNo)", headers: harness.authorized("u3")))
            try check(
                "GET /api/v1/subscriptions/orders/{orderNo}", "another user's",
                try await harness.client.get("/api/v1/subscriptions/orders/\(orderNo)", headers: harness.authorized("u2")))
            try check(
                "POST /api/v1/subscriptions/orders/{orderNo}/cancel", "own",
                try await harness.client.post(
                    "/api/v1/subscriptions/orders/\(orderNo)/cancel", json: [String: String](), headers: harness.authorized("u3")))
            try check(
                create, "unknown product",
                try await harness.client.post(
                    "/api/v1/subscriptions/orders", json: ["productId": "com.example.none", "requestId": "r2"], headers: harness.authorized("u1")))
            #expect(checked >= 38)
            // The validator itself refuses what does not match.
            let error: [String: Any] = ["$ref": "#/components/schemas/Error"]
            #expect(!validator.validate(.object(["code": .string("X")]), against: error, at: "body").isEmpty)
            #expect(
                !validator.validate(.object(["code": .bool(true), "message": .string(""), "traceId": .string("")]), against: error, at: "body")
                    .isEmpty)
            #expect(
                !validator.validate(
                    .object(["code": .string(""), "message": .string(""), "traceId": .string(""), "extra": .null]), against: error, at: "body"
                ).isEmpty)
            #expect(!validator.validate(.string("1.2345678"), against: ["$ref": "#/components/schemas/CreditAmount"], at: "amount").isEmpty)
        }
    }
}

/// Just enough JSON Schema (2020-12 as OpenAPI 3.1 uses it) for the ingress document: $ref,
/// anyOf, type (one or several), required, properties, additionalProperties false, items, enum,
/// pattern and the date-time / date formats.
struct SchemaValidator {
    let document: [String: Any]

    /// What a local reference (`#/components/…`) points to; other values are returned unchanged.
    func resolve(_ value: Any?) -> Any? {
        guard let object = value as? [String: Any], let reference = object["$ref"] as? String else { return value }
        return resolve(reference)
    }

    func resolve(_ reference: String) -> Any? {
        guard reference.hasPrefix("#/") else { return nil }
        var node: Any? = document
        for key in reference.dropFirst(2).split(separator: "/") { node = (node as? [String: Any])?[String(key)] }
        return node
    }

    func validate(_ value: JSONValue, against schemaValue: Any, at path: String) -> [String] {
        guard let schema = resolve(schemaValue) as? [String: Any] else { return ["\(path): unresolvable schema"] }
        if let branches = schema["anyOf"] as? [Any] {
            let outcomes = branches.map { validate(value, against: $0, at: path) }
            if !outcomes.contains(where: \.isEmpty) { return ["\(path): matches no anyOf branch: \(outcomes.flatMap { $0 })"] }
        }
        var problems: [String] = []
        if let types = schema["type"].map({ ($0 as? [String]) ?? [$0 as? String ?? ""] }), !types.contains(value.type) {
            if !(value.type == "integer" && types.contains("number")) { return ["\(path): \(value) is not \(types)"] }
        }
        if let allowed = schema["enum"] as? [String], case .string(let text) = value, !allowed.contains(text) {
            problems.append("\(path): \(text) not in \(allowed)")
        }
        switch value {
        case .string(let text):
            if let pattern = schema["pattern"] as? String, text.range(of: pattern, options: .regularExpression) == nil {
                problems.append("\(path): \(text) does not match \(pattern)")
            }
            if schema["format"] as? String == "date-time", RFC3339.date(from: text) == nil { problems.append("\(path): not date-time") }
            if schema["format"] as? String == "date", text.range(of: #"^\d{4}-\d{2}-\d{2}$"#, options: .regularExpression) == nil {
                problems.append("\(path): not a date")
            }
        case .object(let object):
            let properties = schema["properties"] as? [String: Any] ?? [:]
            for key in schema["required"] as? [String] ?? [] where object[key] == nil { problems.append("\(path).\(key) is required") }
            if schema["additionalProperties"] as? Bool == false {
                for key in object.keys where properties[key] == nil { problems.append("\(path).\(key) is not documented") }
            }
            for (key, child) in object { if let property = properties[key] { problems += validate(child, against: property, at: "\(path).\(key)") } }
        case .array(let array):
            if let items = schema["items"] {
                for (index, element) in array.enumerated() { problems += validate(element, against: items, at: "\(path)[\(index)]") }
            }
        default: break
        }
        return problems
    }
}

/// A JSON value that keeps booleans and numbers apart (Foundation's JSONSerialization does not).
enum JSONValue: Decodable, CustomStringConvertible {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    /// An object's member; nil for anything else.
    subscript(key: String) -> JSONValue? {
        guard case .object(let object) = self else { return nil }
        return object[key]
    }

    /// The JSON Schema type name.
    var type: String {
        switch self {
        case .null: "null"
        case .bool: "boolean"
        case .integer: "integer"
        case .number: "number"
        case .string: "string"
        case .array: "array"
        case .object: "object"
        }
    }

    var description: String {
        switch self {
        case .null: "null"
        case .bool(let value): "\(value)"
        case .integer(let value): "\(value)"
        case .number(let value): "\(value)"
        case .string(let value): "\"\(value)\""
        case .array(let value): "\(value)"
        case .object(let value): "\(value)"
        }
    }
}
