// The command line's conventions, on top of CLI11: every mistake is reported as
// "coil: error: ..." naming the command and the option, with a did-you-mean where one is close,
// and exits 2 (kExitUsage); CLI11's own messages and exit codes (104-114) never reach the user.
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

namespace coil::cli {

/// Parses argv into `app` (whose subcommands are coil's commands). Returns the exit code to
/// stop with, after printing help or the version (0) or reporting a mistake (2), or nullopt
/// when the chosen command should run.
std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv);

/// Prints "coil: error: MESSAGE" to stderr.
void print_error(const std::string& message);

}  // namespace coil::cli
