#include "infera/sim/plot.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "infera/common/subprocess.h"
#include "infera/sim/plot_report_py.h"  // generated: kPlotReportPy

namespace infera::sim {

Status write_plots(std::string_view report_json, const std::string& prefix) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string tag = std::to_string(::getpid()) + "_" + std::to_string(reinterpret_cast<uintptr_t>(&prefix));
  const auto script = dir / ("infera_plot_" + tag + ".py");
  const auto data = dir / ("infera_plot_" + tag + ".json");
  const auto log = dir / ("infera_plot_" + tag + ".log");
  std::ofstream(script) << kPlotReportPy;
  std::ofstream(data) << report_json;
  auto code = run_process({"/usr/bin/python3", script.string(), data.string(), prefix},
                          std::chrono::seconds(120), log.string());
  std::string output;
  if (!code.ok() || *code != 0) {
    std::ifstream in(log);
    output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::filesystem::remove(script);
  std::filesystem::remove(data);
  std::filesystem::remove(log);
  if (!code.ok()) return code.status();
  if (*code != 0) {
    return internal_error("plotting failed (is python3-matplotlib installed?): " +
                          output.substr(output.size() > 600 ? output.size() - 600 : 0));
  }
  return ok_status();
}

}  // namespace infera::sim
