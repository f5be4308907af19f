import Foundation

// subsctl: operations tool. Each subcommand lives in its own file and is listed in
// `Subsctl.commands`; this file only runs the one the arguments name.
exit(await Subsctl.run(Array(CommandLine.arguments.dropFirst())))
