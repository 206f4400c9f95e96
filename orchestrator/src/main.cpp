// `mxablate`: the user-facing command line.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>

#include "cli_errors.h"
#include "commands.h"
#include "mxablate/analysis/escape.h"

int main(int argc, char** argv) {
  using namespace mxablate::cli;
  // Error messages quote names from recipes, logs and databases: never raw to the terminal.
  const auto shown = [](const char* what) { return mxablate::escape::terminal(what); };
  CLI::App app{"mxablate: controlled ablation experiments on MXFP4 training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "mxablate 0.1.0");
  register_quant_command(app);
  register_plan_command(app);
  register_run_command(app);
  register_status_command(app);
  register_query_command(app);
  register_ingest_command(app);
  register_analysis_commands(app);
  register_data_command(app);
  register_cancel_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "mxablate: " << shown(e.what()) << " (see --help)\n";
    return kExitBadInput;
  } catch (const ExitStatus& e) {
    if (*e.what()) std::cerr << "mxablate: " << shown(e.what()) << "\n";
    return e.code;
  } catch (const InputError& e) {
    std::cerr << "mxablate: " << shown(e.what()) << "\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "mxablate: " << shown(e.what()) << "\n";
    return kExitFailure;
  }
  return kExitOk;
}
