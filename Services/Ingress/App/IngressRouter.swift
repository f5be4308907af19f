import HTTPServer

/// The ingress's routes on `context`, with their middleware; nothing is started (tests call
/// the router directly, with a database and no broker).
///
/// Every route maps database errors (`DatabaseErrors`). The user API needs a user token
/// (`UserAuthentication`), the metering API a service token (`ServiceAuthentication`); Apple's
/// notifications carry their own signature, and the probes and the API document are open.
/// Metrics are served on the internal listener only (`HealthRoutes.internalRouter`).
func buildRouter(_ context: IngressContext) throws -> Router<IngressRequestContext> {
    var router = Router(context: IngressRequestContext.self)
    router.add(middleware: DatabaseErrors())
    HealthRoutes(readiness: context.readiness).register(in: &router)
    try OpenAPIRoutes().register(in: &router)
    router.group(NotificationRoutes.prefix) { NotificationRoutes(context: context).register(in: &$0) }
    router.group("/api/v1", middleware: [UserAuthentication(authenticator: context.authenticator)]) { api in
        OrderRoutes(context: context).register(in: &api)
        SubmissionRoutes(context: context).register(in: &api)
        ImportRoutes(context: context).register(in: &api)
        CatalogueRoutes(context: context).register(in: &api)
        AccountRoutes(context: context).register(in: &api)
    }
    router.group("/api/v1/credits", middleware: [ServiceAuthentication(authenticator: context.services)]) { metering in
        CreditsRoutes(context: context).register(in: &metering)
    }
    return router
}
