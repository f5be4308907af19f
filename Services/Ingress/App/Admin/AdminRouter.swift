import Credits
import HTTPServer
import Pipeline
import Storage

/// The admin listener's routes (`ADMIN_HTTP_*`), apart from the public ones: the support lookup
/// and the event queue for any admin token, the actions for operator tokens, and the API document
/// (`/admin/openapi.json`, open like the public one). Every route maps
/// database errors and refusals (`DatabaseErrors`, `AdminRefusals`); nothing is started.
func buildAdminRouter(_ context: IngressContext) throws -> Router<AdminRequestContext> {
    let authenticator = AdminAuthenticator(settings: context.configuration.admin)
    var router = Router(context: AdminRequestContext.self)
    router.add(middleware: DatabaseErrors())
    router.add(middleware: AdminRefusals())
    try OpenAPIRoutes(resource: "admin-openapi", path: "/admin/openapi.json").register(in: &router)
    let routes = AdminRoutes(
        cases: context.cases, queue: context.queue, events: context.events, chains: context.chains, tasks: context.tasks,
        users: context.users, ledger: context.ledger, cursors: PageCursorSigner(key: context.configuration.cursorSigningKey),
        eventTopic: context.configuration.pipeline.eventTopic, creditLimits: context.configuration.creditLimits,
        clock: context.clock, entitlements: context.entitlementAdminRoutes, webhooks: context.webhookRoutes)
    let entitlements = routes.entitlements
    router.group("/admin/v1", middleware: [AdminAuthentication(authenticator: authenticator, requiredRole: .viewer)]) {
        routes.registerReads(in: &$0)
        entitlements.registerReads(in: &$0)
    }
    router.group("/admin/v1", middleware: [AdminAuthentication(authenticator: authenticator, requiredRole: .operator)]) {
        routes.registerActions(in: &$0)
        entitlements.registerActions(in: &$0)
    }
    routes.webhooks.register(in: &router, authenticator: authenticator)
    context.appleAdminRoutes.register(in: &router, authenticator: authenticator)
    let sessions = ConsoleSessions(
        store: context.consoleSessions, settings: context.configuration.admin, authenticator: authenticator, clock: context.clock)
    let console = Console(routes: routes, sessions: sessions)
    console.registerSignIn(in: &router)
    router.group("/admin", middleware: [ConsoleSession(sessions: sessions)]) {
        console.registerPages(in: &$0)
    }
    return router
}

/// An action the current state does not allow answers 409 with the refusal's code; a chain or
/// event that does not exist, 404.
struct AdminRefusals: RouterMiddleware {
    func handle(
        _ request: HTTPRequest, context: AdminRequestContext,
        next: (HTTPRequest, AdminRequestContext) async throws -> HTTPResponse
    ) async throws -> HTTPResponse {
        do {
            return try await next(request, context)
        } catch {
            guard let mapped = Self.httpError(for: error) else { throw error }
            throw mapped
        }
    }

    /// The answer a refusal stands for; nil for any other error.
    static func httpError(for error: any Error) -> HTTPError? {
        switch error {
        case let refusal as ChainActionRefusal:
            HTTPError(status: refusal.code == .notFound ? 404 : 409, code: refusal.code.rawValue, message: refusal.message)
        case let refusal as EventReplayRefusal:
            HTTPError(status: refusal.code == .notFound ? 404 : 409, code: refusal.code.rawValue, message: refusal.message)
        case UserStore.ConsentRestoreError.unknownUser(let user):
            APIError.notFound("no user \(user): nothing restored")
        case UserStore.ConsentRestoreError.notRescinded(let user):
            HTTPError(
                status: 409, code: "CONSENT_NOT_RESCINDED",
                message: "user \(user)'s consent is not rescinded (never, or restored already); nothing changed")
        case let refusal as EntitlementGrantError:
            EntitlementAdminRoutes.httpError(for: refusal)
        case CreditAdjustmentError.unknownUser(let user):
            APIError.notFound("no user \(user): nothing booked")
        case CreditAdjustmentError.amountOutOfRange(let problem):
            HTTPError(status: 422, code: "AMOUNT_OUT_OF_RANGE", message: "\(problem); nothing booked")
        case CreditAdjustmentError.numberUsedForAnother(let first):
            HTTPError(
                status: 409, code: "ADJUSTMENT_NUMBER_CONFLICT",
                message: "adjustment number \(first.adjustmentNo) was used for another adjustment; nothing booked")
        default: nil
        }
    }
}
