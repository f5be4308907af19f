import Foundation
import FulfillmentApp
import ServiceRuntime

let logger = Logger(label: "fulfillment")
do {
    let configuration = try FulfillmentConfiguration.load(environment: ProcessInfo.processInfo.environment)
    try await FulfillmentApplication(configuration: configuration, logger: logger).run()
} catch let error as ConfigurationError {
    logger.critical("invalid configuration", ["error": .string(error.description)])
    FileHandle.standardError.write(Data((error.description + "\n").utf8))
    exit(2)
} catch {
    logger.critical("fulfillment stopped on error", ["error": .string("\(error)")])
    exit(1)
}
