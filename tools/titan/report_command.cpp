// `titan report RUN_DIR [--output FILE]`: the run report's command line;
// reading the folder and drawing the page are in report/.
#include <filesystem>
#include <fstream>
#include <iostream>

#include "commands.h"
#include "report/html_report.h"
#include "report/run_folder.h"
#include "titan/error.hpp"

namespace titan::cli {

namespace {

const char* kReportUsage =
    "usage: titan report RUN_DIR [--output FILE]\n"
    "  Writes one self-contained HTML page (no scripts, nothing fetched; default RUN_DIR/report.html)\n"
    "  about the run in RUN_DIR (a `titan train` job.dump_folder): its summary, charts over steps of\n"
    "  loss and validation loss, grad norm, tokens/s, MFU, memory, data loading and every other logged\n"
    "  metric, each rank's spread where all ranks saved metrics (metrics.save_for_all_ranks), and the\n"
    "  resolved config. A run still writing, or killed mid-write, is read up to its last whole line.\n"
    "  Exit status 0 when the page was written, 1 when RUN_DIR is not a run or a metrics line is damaged.\n";

}  // namespace

int report_command(const Args& args) {
  if (wants_help(args)) {
    std::cout << kReportUsage;
    return 0;
  }
  std::string run_dir, output;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--output" || arg == "-o") {
      if (i + 1 >= args.size()) throw Error("report: " + arg + " needs a file name\n" + kReportUsage);
      output = args[++i];
    } else if (!arg.empty() && arg[0] == '-') {
      throw Error("report: unknown option '" + arg + "'\n" + kReportUsage);
    } else if (run_dir.empty()) {
      run_dir = arg;
    } else {
      throw Error("report: one run folder expected, got '" + run_dir + "' and '" + arg + "'\n" + kReportUsage);
    }
  }
  if (run_dir.empty()) throw Error(std::string("report: no run folder given\n") + kReportUsage);
  if (output.empty()) output = (std::filesystem::path(run_dir) / "report.html").string();

  report::Report page = report::build_report(report::read_run_folder(run_dir));
  // Written beside and renamed, so a browser reloading the page while a
  // newer report is written never sees half of one.
  const std::string partial = output + ".partial";
  {
    std::ofstream out(partial, std::ios::binary);
    out << page.html;
    out.close();
    if (!out) throw Error("report: cannot write '" + partial + "' (check --output and the folder's permissions)");
  }
  std::error_code error;
  std::filesystem::rename(partial, output, error);
  if (error) throw Error("report: cannot rename '" + partial + "' to '" + output + "': " + error.message());
  for (const auto& note : page.notes) std::cout << "note: " << note << "\n";
  std::cout << "wrote " << output << ": " << page.chart_ids.size() << " charts, "
            << (page.last_step < 0 ? std::string("no steps yet") : "up to step " + std::to_string(page.last_step))
            << "\n";
  return 0;
}

}  // namespace titan::cli
