import Foundation
import FulfillmentApp
import ServiceRuntime

let commandLine = ServiceCommandLine(
    name: "fulfillment",
    purpose: """
        A fulfillment worker of the subscriptions back end: consumes the event topic in one Kafka consumer group
        and applies subscription state and credits in PostgreSQL, and runs the scheduled jobs.
        """,
    load: FulfillmentConfiguration.load(environment:))
exit(await commandLine.main { configuration, logger in try await FulfillmentApplication(configuration: configuration, logger: logger).run() })
