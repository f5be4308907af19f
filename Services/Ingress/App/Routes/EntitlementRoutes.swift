import Crypto
import Domain
import Foundation
import HTTPServer
import ServiceRuntime
import Storage

/// What a user may use now: `GET /api/v1/entitlements` for the user's own token,
/// `GET /api/v1/users/{userId}/entitlements` for the app's back-end services (`SERVICE_TOKENS`),
/// and the public key of signed answers (`GET /api/v1/entitlements/signing-key`).
///
/// With a signing key and an `X-Nonce` header, the answer carries `Entitlements-Signature`: a
/// compact ES256 JWS over the nonce, the user, the body's SHA-256 and the time, so an app can tell
/// our answer from a forged one (openapi.json's description says how to check it).
struct EntitlementRoutes: Sendable {
    let entitlements: EntitlementStore
    let signer: EntitlementSigner?
    let clock: any WallClock

    /// The user's own entitlements, in the user API's group.
    func registerUser(in api: inout RouterGroup<IngressRequestContext>) {
        api.get("entitlements") { request, context in try await answer(request, userID: try context.requireUser().userID) }
    }

    /// Any user's entitlements, in the service API's group.
    func registerService(in services: inout RouterGroup<IngressRequestContext>) {
        services.get("users/{userId}/entitlements") { request, context in
            _ = try context.requireService()
            guard let userID = request.pathParameter("userId"), (1...128).contains(userID.count) else {
                throw APIError.invalidRequest("userId must be a user id of 1 to 128 characters")
            }
            return try await answer(request, userID: userID)
        }
    }

    /// The signing key, open like the API document: it is public.
    func registerOpen(in router: inout Router<IngressRequestContext>) {
        router.get("/api/v1/entitlements/signing-key") { _, _ in
            guard let signer else { throw APIError.notFound("entitlement answers are not signed here (no signing key)") }
            return .json(signer.jwk)
        }
    }

    struct Answer: Encodable, Sendable {
        let entitlements: [EntitlementItem]
    }

    func answer(_ request: HTTPRequest, userID: String) async throws -> HTTPResponse {
        let nonce = try Self.nonce(request)
        let now = clock.now()
        var response = HTTPResponse.json(
            Answer(entitlements: try await entitlements.entitlements(userID: userID, now: now)))
        if let nonce, let signer {
            response.headers.append(
                (EntitlementSigner.header, try signer.signature(nonce: nonce, userID: userID, body: response.body, now: now)))
        }
        return response
    }

    /// `X-Nonce`: 8 to 128 visible ASCII characters (a UUID, random base64url); absent, nil.
    static func nonce(_ request: HTTPRequest) throws(HTTPError) -> String? {
        guard let nonce = request.header("x-nonce") else { return nil }
        guard (8...128).contains(nonce.utf8.count), nonce.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else {
            throw APIError.invalidRequest("X-Nonce must be 8 to 128 visible ASCII characters (e.g. a random UUID)")
        }
        return nonce
    }
}

/// Signs entitlement answers with `ENTITLEMENT_SIGNING_KEY_PATH`'s P-256 key (ES256).
///
/// The JWS's header names the key by its RFC 7638 thumbprint (`kid`), which the served JWK carries
/// too, so a rotated key is told apart from the old one.
struct EntitlementSigner: Sendable {
    /// The response header carrying the signature.
    static let header = "Entitlements-Signature"

    private let key: P256PrivateKey
    /// The public key as a JSON Web Key (RFC 7517): `kty`, `crv`, `x`, `y`, `kid`, `alg`, `use`.
    let jwk: [String: String]
    private let protectedHeader: String

    init(key: P256PrivateKey) {
        self.key = key
        // A key P256PrivateKey parsed is always one PublicKey accepts, with P-256 components.
        let components = try! PublicKey(derSubjectPublicKeyInfo: key.publicKey.derRepresentation).components
        guard case .p256(let x, let y) = components else { preconditionFailure("a P-256 key without P-256 components") }
        let (xText, yText) = (Base64URL.encode(x), Base64URL.encode(y))
        // RFC 7638: the required members in lexicographic order, no blanks.
        let thumbprint = #"{"crv":"P-256","kty":"EC","x":"\#(xText)","y":"\#(yText)"}"#
        let kid = Base64URL.encode(SHA256.hash(Array(thumbprint.utf8)))
        jwk = ["kty": "EC", "crv": "P-256", "x": xText, "y": yText, "kid": kid, "alg": "ES256", "use": "sig"]
        protectedHeader = Base64URL.encode(Array(#"{"alg":"ES256","kid":"\#(kid)","typ":"JWT"}"#.utf8))
    }

    struct Claims: Encodable {
        let nonce: String
        let userId: String
        /// Lower-case hex SHA-256 of the answer's body bytes, exactly as sent.
        let bodySha256: String
        /// Seconds since 1970 (UTC) when the answer was made.
        let iat: Int64
    }

    /// The compact JWS (`header.claims.signature`) over one answer.
    func signature(nonce: String, userID: String, body: [UInt8], now: Date) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let claims = try encoder.encode(
            Claims(
                nonce: nonce, userId: userID, bodySha256: Hex.encode(SHA256.hash(body)),
                iat: Int64(now.timeIntervalSince1970.rounded(.down))))
        let signingInput = protectedHeader + "." + Base64URL.encode(claims)
        return signingInput + "." + Base64URL.encode(try key.signature(for: Array(signingInput.utf8)))
    }
}
