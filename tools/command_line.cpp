#include "command_line.h"

#include <cctype>
#include <cstdio>
#include <vector>

#include <fmt/format.h>

#include "commands.h"
#include "support/suggest.h"

namespace coil::cli {
namespace {

/// The commands --help lists (not the hidden ones).
std::vector<CLI::App*> commands(CLI::App& app) {
  return app.get_subcommands([](CLI::App* c) { return !c->get_group().empty(); });
}

/// The commands with their one-line descriptions, for the messages that need a command.
std::string command_list(CLI::App& app) {
  std::string s = "commands:\n";
  for (CLI::App* c : commands(app))
    s += fmt::format("  {:<8} {}\n", c->get_name(), c->get_description());
  s += "run 'coil COMMAND --help' for a command's options";
  return s;
}

/// Every spelling of the options of `cmd` ("-o", "--output-dir"), for suggestions.
std::vector<std::string> option_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd.get_options()) {
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

/// What an option's value must be, from CLI11's type name (set to the form, like NAME=VALUE,
/// where a type would not say it).
std::string value_kind(const CLI::Option* o) {
  std::string t = o ? o->get_type_name() : "";
  if (t == "INT") return "an integer";
  if (t == "UINT") return "a non-negative integer";
  if (t == "FLOAT") return "a number";
  if (t.empty() || t == "TEXT") return "a value";
  return t;
}

const CLI::Option* find_option(const CLI::App& cmd, const std::string& name) {
  for (const CLI::Option* o : cmd.get_options())
    if (o->check_name(name)) return o;
  return nullptr;
}

/// CLI11's ParseError for command `cmd` as coil words it. CLI11 2.1 carries no structured
/// fields, so the common messages are recognised by their text; any other is passed on.
std::string describe(const CLI::ParseError& e, const CLI::App& cmd) {
  std::string where = "coil " + cmd.get_name();
  std::string what = e.what();
  if (dynamic_cast<const CLI::RequiredError*>(&e)) {
    for (const CLI::Option* o : cmd.get_options()) {
      if (!o->get_required() || o->count() > 0) continue;
      if (o->get_positional())
        return fmt::format("'{}' needs a {} (usage: {} {} [OPTIONS])", where, o->get_type_name(),
                           where, o->get_type_name());
      return fmt::format("'{}' needs the option {} {}", where, o->get_name(), o->get_type_name());
    }
  }
  // "NAME: rest" for the errors about one option.
  size_t colon = what.find(": ");
  std::string name = colon == std::string::npos ? "" : what.substr(0, colon);
  std::string rest = colon == std::string::npos ? what : what.substr(colon + 2);
  const CLI::Option* opt = find_option(cmd, name);
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) && opt) {
    if (rest.find("required") != std::string::npos && rest.find("missing") != std::string::npos)
      return fmt::format("option '{}' for '{}' needs a value ({})", name, where, value_kind(opt));
    if (rest.rfind("At Most", 0) == 0) {
      std::string times = rest.substr(rest.rfind(' ') + 1);
      return fmt::format("option '{}' for '{}' is given {} times; give it once", name, where,
                         times);
    }
  }
  if (dynamic_cast<const CLI::ConversionError*>(&e)) {
    // "Could not convert: --runs = abc"
    std::string prefix = "Could not convert: ";
    size_t eq = what.find(" = ");
    if (what.rfind(prefix, 0) == 0 && eq != std::string::npos) {
      std::string n = what.substr(prefix.size(), eq - prefix.size());
      return fmt::format("option '{}' for '{}': '{}' is not {}", n, where, what.substr(eq + 3),
                         value_kind(find_option(cmd, n)));
    }
  }
  if (opt) return fmt::format("option '{}' for '{}': {}", name, where, rest);
  if (!what.empty()) what[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(what[0])));
  return fmt::format("{}: {}", where, what);
}

int usage_error(const std::string& message) {
  print_error(message);
  return kExitUsage;
}

}  // namespace

void print_error(const std::string& message) {
  std::fprintf(stderr, "coil: error: %s\n", message.c_str());
}

std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  if (argc <= 1) return usage_error("missing command\n" + command_list(app));
  // The command first: CLI11 would call an unknown one, or an unknown option before it, "A
  // subcommand is required" (exit 106).
  CLI::App* cmd = nullptr;
  for (int i = 1; i < argc && !cmd; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help" || a == "--version") break;
    for (CLI::App* c : app.get_subcommands([](CLI::App*) { return true; }))
      if (c->get_name() == a) cmd = c;
    if (cmd) break;
    std::vector<std::string> names;
    for (CLI::App* c : commands(app)) names.push_back(c->get_name());
    if (a.size() > 1 && a[0] == '-')
      return usage_error(
          fmt::format("unknown option '{}' for 'coil'{} (options go after the "
                      "command)\n{}",
                      a, did_you_mean(a, option_names(app)), command_list(app)));
    return usage_error(
        fmt::format("unknown command '{}'{}\n{}", a, did_you_mean(a, names), command_list(app)));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(cmd ? describe(e, *cmd) : std::string(e.what()));
  }
  if (!cmd) return usage_error("missing command\n" + command_list(app));
  // Options and arguments CLI11 did not match (the commands allow extras so that coil words the
  // message, naming the command).
  std::vector<std::string> extra = cmd->remaining();
  if (!extra.empty()) {
    const std::string& a = extra.front();
    std::string where = "coil " + cmd->get_name();
    if (a.size() > 1 && a[0] == '-') {
      std::string name = a.substr(0, a.find('='));
      return usage_error(fmt::format("unknown option '{}' for '{}'{}", name, where,
                                     did_you_mean(name, option_names(*cmd))));
    }
    return usage_error(
        fmt::format("unexpected argument '{}' for '{}' (see '{} --help')", a, where, where));
  }
  return std::nullopt;
}

}  // namespace coil::cli
