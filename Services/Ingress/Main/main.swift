import Foundation
import IngressApp
import ServiceRuntime

let commandLine = ServiceCommandLine(
    name: "ingress",
    purpose: """
        The ingress of the subscriptions back end: App Store Server Notifications V2, the clients' REST API
        and the metering API, storing each event in PostgreSQL and publishing it to Kafka.
        """,
    load: IngressConfiguration.load(environment:))
exit(await commandLine.main { configuration, logger in try await IngressApplication(configuration: configuration, logger: logger).run() })
