// Every `mxablate` subcommand registers itself on the application here. A command's callback
// throws InputError (exit 2) or any other exception (exit 1); main() turns it into one line.
#pragma once

namespace CLI {
class App;
}

namespace mxablate::cli {

void register_quant_command(CLI::App& app);
void register_plan_command(CLI::App& app);
void register_run_command(CLI::App& app);
void register_status_command(CLI::App& app);
void register_query_command(CLI::App& app);
void register_ingest_command(CLI::App& app);
void register_analysis_commands(CLI::App& app);
void register_data_command(CLI::App& app);
void register_cancel_command(CLI::App& app);

}  // namespace mxablate::cli
