import Foundation
import SubsctlCore

// subsctl: operations tool. Every command lives in SubsctlCore; this file only runs the one the
// arguments name and exits with its status.
exit(await Subsctl.run(Array(CommandLine.arguments.dropFirst())))
