import AppStore
import HTTPServer
import Webhooks

/// The ingress's routes on `context`, with their middleware; nothing is started (tests call
/// the router directly, with a database and no broker).
///
/// Every route maps database errors (`DatabaseErrors`). The user API needs a user token
/// (`UserAuthentication`), the metering API and the entitlement reads by user id a service token
/// (`ServiceAuthentication`); Apple's notifications carry their own signature, and the probes, the
/// API document and the entitlements' signing key are open.
/// Metrics are served on the internal listener only (`HealthRoutes.internalRouter`).
func buildRouter(_ context: IngressContext) throws -> Router<IngressRequestContext> {
    var router = Router(context: IngressRequestContext.self)
    router.add(middleware: DatabaseErrors())
    HealthRoutes(readiness: context.readiness).register(in: &router)
    try OpenAPIRoutes().register(in: &router)
    let webhooks = context.configuration.webhooks
    router.group(NotificationRoutes.prefix) {
        NotificationRoutes(
            verifier: context.verifier, intake: context.intake, cipher: context.cipher, limits: context.notificationLimits,
            refusals: context.refusals, logger: context.logger, forwards: { webhooks.forwards(environment: $0) }
        ).register(in: &$0)
    }
    let retention = context.retentionRoutes
    router.group(RetentionRoutes.prefix) { retention.register(in: &$0) }
    let appStore = context.configuration.appStore
    let submissions = context.submissionRoutes
    let entitlements = context.entitlementRoutes
    let offers = context.offerRoutes
    entitlements.registerOpen(in: &router)
    router.group("/api/v1", middleware: [UserAuthentication(authenticator: context.authenticator)]) { api in
        OrderRoutes(
            orders: context.orders, appStore: appStore, openOrderWindow: context.configuration.openOrderWindow, clock: context.clock
        ).register(in: &api)
        submissions.register(in: &api)
        ImportRoutes(
            imports: context.imports, receiptVerifier: context.receiptVerifier, submissions: submissions,
            fulfillmentWait: context.configuration.fulfillmentWait
        ).register(in: &api)
        CatalogueRoutes(
            catalogue: context.catalogue, subscriptions: context.subscriptions, appKey: appStore.bundleId, clock: context.clock
        ).register(in: &api)
        AccountRoutes(
            subscriptions: context.subscriptions, consents: context.consents, credits: context.credits,
            statements: context.statements, cursors: PageCursorSigner(key: context.configuration.cursorSigningKey),
            clock: context.clock
        ).register(in: &api)
        entitlements.registerUser(in: &api)
        offers.register(in: &api)
    }
    router.group("/api/v1/credits", middleware: [ServiceAuthentication(authenticator: context.services)]) { metering in
        context.creditsRoutes.register(in: &metering)
    }
    router.group("/api/v1", middleware: [ServiceAuthentication(authenticator: context.services)]) { services in
        entitlements.registerService(in: &services)
    }
    return router
}
