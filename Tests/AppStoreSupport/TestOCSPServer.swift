import Crypto
import DemoSigner
import Foundation
import HTTPServer
import ServiceRuntime

/// OCSP responders for a `TestAppleSigner` chain on 127.0.0.1 (a free port): `POST /intermediate`
/// answers for the leaf (signed by the intermediate CA), `POST /root` for the intermediate
/// (signed by the root). Each answers as scripted and counts its requests.
///
/// Start it first, build the signer with `Options(ocspResponderBaseURL: server.baseURL)`, then
/// `serve(signer)`.
///
/// Sendable: all mutable state sits behind one Mutex.
public final class TestOCSPServer: Sendable {
    /// Which responder.
    public enum Responder: String, Sendable, Hashable, CaseIterable {
        /// Answers for the leaf.
        case intermediate
        /// Answers for the intermediate.
        case root
    }

    /// What a responder answers.
    public enum Behaviour: Sendable, Hashable {
        case status(TestOCSPStatus)
        /// An HTTP error status instead of an OCSP response.
        case httpError(Int)
        /// An OCSP response with an unsuccessful status (3 = tryLater).
        case unsuccessful(Int32)
        /// Bytes that are not an OCSP response.
        case garbage
        /// A "good" answer signed by a key that is not the issuer's.
        case wrongSigner
        /// A "good" answer held back this long.
        case delayed(Duration)
    }

    private struct State {
        var signer: TestAppleSigner?
        var behaviour: [Responder: Behaviour] = [:]
        var requests: [Responder: Int] = [:]
    }

    private let state = Locked(State())
    private let server: HTTPServer
    private let clock: any WallClock
    /// nextUpdate - thisUpdate of the answers; nil: answers carry no nextUpdate.
    public let validity: TimeInterval?

    public init(clock: any WallClock = SystemClock(), validity: TimeInterval? = 3600) {
        self.clock = clock
        self.validity = validity
        var router = Router()
        let state = self.state
        for responder in Responder.allCases {
            router.post("/\(responder.rawValue)") { request in
                await Self.answer(request, responder: responder, state: state, clock: clock, validity: validity)
            }
        }
        server = HTTPServer(
            configuration: HTTPServerConfiguration(host: "127.0.0.1", port: 0, threadPoolSize: 2, shutdownGracePeriod: .milliseconds(200)),
            router: router, logger: Logger(label: "test.ocsp", level: .warning))
    }

    /// Starts listening; returns the base URL for `TestAppleSigner.Options.ocspResponderBaseURL`.
    public func start() throws -> String {
        try server.start()
        return baseURL
    }

    public var baseURL: String { "http://127.0.0.1:\(server.port)" }

    public func shutdown() async { await server.shutdown() }

    /// Answers for this signer's chain from now on ("good" unless scripted otherwise).
    public func serve(_ signer: TestAppleSigner) { state.withLock { $0.signer = signer } }

    public func set(_ behaviour: Behaviour, for responder: Responder) { state.withLock { $0.behaviour[responder] = behaviour } }

    public func requests(_ responder: Responder) -> Int { state.withLock { $0.requests[responder] ?? 0 } }

    private static func answer(
        _ request: HTTPRequest, responder: Responder, state: Locked<State>, clock: any WallClock, validity: TimeInterval?
    ) async -> HTTPResponse {
        let (signer, behaviour) = state.withLock { state in
            state.requests[responder, default: 0] += 1
            return (state.signer, state.behaviour[responder] ?? .status(.good))
        }
        guard let signer else { return HTTPResponse(status: 503) }
        var issuer = responder == .root ? signer.root : signer.intermediate
        var key = responder == .root ? signer.rootKey : signer.intermediateKey
        var status = TestOCSPStatus.good
        switch behaviour {
        case .status(let scripted): status = scripted
        case .httpError(let code): return HTTPResponse(status: code)
        case .unsuccessful(let code):
            return ocsp((try? TestOCSPResponder.failure(status: code)) ?? [])
        case .garbage: return ocsp(Array("not an OCSP response".utf8))
        case .wrongSigner:
            key = P256PrivateKey.generate()
            guard
                let impostor = try? TestCertificateIssuer.selfSigned(
                    TestCertificateSpec(commonName: issuer.subject, notBefore: Date() - 60, notAfter: Date() + 86400, isCA: true), key: key)
            else { return HTTPResponse(status: 500) }
            issuer = impostor
        case .delayed(let delay): try? await Task.sleep(for: delay)
        }
        let now = clock.now()
        do {
            return ocsp(
                try TestOCSPResponder.response(
                    to: request.body, issuer: issuer, issuerKey: key, status: status, thisUpdate: now,
                    nextUpdate: validity.map { now + $0 }))
        } catch {
            return HTTPResponse(status: 400)
        }
    }

    private static func ocsp(_ body: [UInt8]) -> HTTPResponse {
        HTTPResponse(status: 200, headers: [("Content-Type", "application/ocsp-response")], body: body)
    }
}
