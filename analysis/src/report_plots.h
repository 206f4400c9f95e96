// Internal to the report: the figures as gnuplot scripts, and gnuplot itself.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "mxablate/analysis/report.h"

namespace mxablate::analysis::detail {

// Full path of the gnuplot program, or nullopt when it is not installed.
std::optional<std::string> find_gnuplot(const std::string& program);

// Runs `script` (which writes WORKDIR/NAME.svg) and returns the SVG text; throws with gnuplot's
// own message when it fails.
std::string run_gnuplot(const std::string& gnuplot, const std::string& script,
                        const std::filesystem::path& workdir, const std::string& name);

// Scripts (with their data files written into `workdir`); empty when there is nothing to plot.
std::string loss_plot_script(const ReportData& data, const std::filesystem::path& workdir,
                             bool zoom, const std::filesystem::path& svg);
std::string telemetry_plot_script(const ReportData& data, const std::string& gemm,
                                  const std::filesystem::path& workdir,
                                  const std::filesystem::path& svg);

}  // namespace mxablate::analysis::detail
