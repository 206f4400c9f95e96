// Internal to the report: the figures as gnuplot scripts plus data files, and gnuplot itself.
//
// gnuplot runs `!cmd`, system(), backquotes, `load`, `call` and macros found in a script, so no
// text from the data ever goes into one. A script holds only constant text, file names made of
// the figure's constant stem and a counter, and integers we chose (colors, dash types). Every
// number and every name goes into the figure's data files; names are read back by gnuplot as
// column headers (`title columnheader(2) noenhanced`) from fields escaped byte by byte
// (escape::gnuplot_datafile_text), which gnuplot only ever shows as text. gnuplot runs in the
// plots directory, so every file it reads or writes is named relative to it.
#pragma once

#include <filesystem>
#include <string>

#include "mxablate/analysis/report.h"

namespace mxablate::analysis::detail {

enum class Figure {
  kLoss,
  kLossZoom,
  kTelemetryFprop,
  kTelemetryDgrad,
  kTelemetryWgrad,
  kExtraTokensVsParams
};
inline constexpr Figure kFigures[] = {Figure::kLoss,           Figure::kLossZoom,
                                      Figure::kExtraTokensVsParams, Figure::kTelemetryFprop,
                                      Figure::kTelemetryDgrad, Figure::kTelemetryWgrad};

// The figure's file stem (STEM.gp, STEM.svg, STEM_*.dat) and its heading on the page.
const char* figure_stem(Figure f);
const char* figure_heading(Figure f);

// Writes the figure's data files into `workdir` and returns its script; empty when the data has
// nothing to plot in this figure.
std::string write_figure(const ReportData& data, Figure f, const std::filesystem::path& workdir);

// Writes `script` to WORKDIR/STEM.gp, runs `gnuplot` on it in `workdir` and returns the SVG it
// wrote (STEM.svg); throws with gnuplot's own message when it fails.
std::string run_gnuplot(const std::string& gnuplot, const std::string& script,
                        const std::filesystem::path& workdir, Figure f);

}  // namespace mxablate::analysis::detail
