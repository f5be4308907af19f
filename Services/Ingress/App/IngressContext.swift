import AppStore
import Pipeline
import Postgres
import ServiceRuntime
import Storage

/// What every route group of the ingress works with, built once at start-up.
struct IngressContext: Sendable {
    let configuration: IngressConfiguration
    let pool: PostgresPool
    let store: EventIntakeStore
    let intake: NotificationIntake
    let verifier: SignedDataVerifier
    let cipher: PayloadCipher
    let authenticator: UserAuthenticator
    let clock: any WallClock
    let logger: Logger
}
