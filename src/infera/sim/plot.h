// PNG plots of a result JSON (TTFT CDF per policy, hit ratio against the bounds, load per
// worker), drawn by Debian's python3-matplotlib from a script embedded in the binary
// (plot_report.py beside this file). Blocks until the plots are written.
#pragma once

#include <string>
#include <string_view>

#include "infera/common/status.h"

namespace infera::sim {

// Writes <prefix>-ttft-cdf.png, <prefix>-hit-ratio.png and <prefix>-load.png.
Status write_plots(std::string_view report_json, const std::string& prefix);

}  // namespace infera::sim
