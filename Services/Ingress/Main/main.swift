import Foundation
import IngressApp
import ServiceRuntime

let logger = Logger(label: "ingress")
do {
    let configuration = try IngressConfiguration.load(environment: ProcessInfo.processInfo.environment)
    try await IngressApplication(configuration: configuration, logger: logger).run()
} catch let error as ConfigurationError {
    logger.critical("invalid configuration", ["error": .string(error.description)])
    FileHandle.standardError.write(Data((error.description + "\n").utf8))
    exit(2)
} catch {
    logger.critical("ingress stopped on error", ["error": .string("\(error)")])
    exit(1)
}
