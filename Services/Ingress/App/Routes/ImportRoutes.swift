import AppStore
import Domain
import Foundation
import HTTPServer
import ServiceRuntime
import Storage

/// Imports of existing purchases (restore on a new device, an app moving to this back end):
/// `POST …/subscriptions/import` with a signed StoreKit 2 transaction or a StoreKit 1 app receipt,
/// verified here (a bare transaction id is never trusted: ids are guessable). A worker then asks
/// Apple's Get Transaction History with it; the answer waits a bounded time for it like an upload.
struct ImportRoutes: Sendable {
    let imports: ImportStore
    let receiptVerifier: AppReceiptVerifier
    /// Verifies a signed transaction as an upload does.
    let submissions: SubmissionRoutes
    /// How long an answer waits for the worker.
    let fulfillmentWait: Duration

    func register(in api: inout RouterGroup<IngressRequestContext>) {
        api.post("subscriptions/import") { request, context in try await start(request, user: try context.requireUser()) }
        api.get("subscriptions/import/{importId}") { request, context in
            let user = try context.requireUser()
            guard let id = request.pathParameter("importId").flatMap(Int64.init), id > 0,
                let state = try await self.imports.state(id, userID: user.userID)
            else { throw APIError.notFound("no such import") }
            return try answer(state)
        }
    }

    struct Body: Decodable {
        let signedTransaction: String?
        let appReceipt: String?
    }

    /// An import as its user reads it (202 while pending, with what is known so far).
    struct Result: Encodable {
        let importId: String
        let status: String
        let chains: [ImportedChain]
        let creditsBalance: Int64
    }

    private func start(_ request: HTTPRequest, user: AuthenticatedUser) async throws -> HTTPResponse {
        let body = try request.decodeJSON(Body.self)
        let proof: (environment: String, lookup: String, source: ImportSource)
        switch (body.signedTransaction, body.appReceipt) {
        case (let jws?, nil):
            let transaction = try await submissions.verify(jws)
            guard let original = transaction.originalTransactionId, let environment = transaction.rawEnvironment else {
                throw APIError.transactionInvalid("the transaction lacks its identifiers")
            }
            proof = (environment, original, .signedTransaction)
        case (nil, let receipt?):
            proof = try await verify(receipt: receipt)
        default:
            throw APIError.invalidRequest("send exactly one of signedTransaction and appReceipt")
        }
        let id = try await imports.request(
            userID: user.userID, environment: proof.environment, source: proof.source, lookupTransactionID: proof.lookup)
        // The worker's task and the events it stores take a few steps: poll the import, bounded.
        let deadline = ContinuousClock.now + fulfillmentWait
        while true {
            guard let state = try await imports.state(id, userID: user.userID) else {
                throw APIError.notFound("no such import")
            }
            if state.status != .pending || ContinuousClock.now >= deadline { return try answer(state) }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    /// A receipt's proof: verified to Apple's roots, its bundle id, and the transaction Apple's
    /// ReceiptUtility would take from it.
    private func verify(receipt: String) async throws -> (environment: String, lookup: String, source: ImportSource) {
        let verified: AppReceipt
        do { verified = try await receiptVerifier.verify(receipt) } catch {
            if error.isRetryable { throw APIError.serviceUnavailable("the receipt could not be verified now") }
            submissions.refuse("app receipt refused", reason: error.code.rawValue)
            throw HTTPError(status: 422, code: error.code.rawValue, message: "the app receipt was refused")
        }
        guard let transactionID = verified.transactionId else {
            throw HTTPError(status: 422, code: AppReceiptError.Code.noTransaction.rawValue, message: "the receipt holds no purchase")
        }
        try submissions.checkForm(of: [transactionID])
        // Xcode receipts have no App Store Server API to ask.
        guard let environment = verified.environment, environment == .production || environment == .sandbox else {
            throw HTTPError(
                status: 422, code: AppReceiptError.Code.environmentMismatch.rawValue,
                message: "the receipt's environment has no App Store Server API")
        }
        return (environment.rawValue, transactionID, .appReceipt)
    }

    private func answer(_ state: ImportState) throws -> HTTPResponse {
        switch state.status {
        case .accountConflict: throw APIError.accountConflict("a purchase in this history belongs to another account")
        case .failed:
            throw HTTPError(
                status: 422, code: state.errorCode ?? "IMPORT_FAILED", message: "Apple's history could not be imported")
        case .pending, .completed:
            let result = Result(
                importId: String(state.importID), status: state.status.rawValue, chains: state.chains,
                creditsBalance: Credits.whole(state.balance))
            return .json(result, status: state.status == .pending ? 202 : 200)
        }
    }
}
