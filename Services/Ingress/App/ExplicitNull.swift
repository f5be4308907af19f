/// An optional response field written as `null` when it has no value, instead of being left out.
///
/// The contract (domain.md) names the fields each answer carries; a client indexing one of them
/// (`body["pendingProductId"]`) must find the key whether or not it has a value.
@propertyWrapper
struct ExplicitNull<Value: Encodable & Sendable>: Encodable, Sendable {
    var wrappedValue: Value?

    init(wrappedValue: Value?) { self.wrappedValue = wrappedValue }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        if let wrappedValue { try container.encode(wrappedValue) } else { try container.encodeNil() }
    }
}
