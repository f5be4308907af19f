import Foundation
import SubsctlCore

// subsctl: operations tool. Every command lives in SubsctlCore, where the tests run them in
// process; this file only hands it the process's arguments and environment and exits with its status.
exit(await Subsctl.run(arguments: Array(CommandLine.arguments.dropFirst()), environment: ProcessInfo.processInfo.environment))
