// The PyTorch-style table of a pipeline's per-rank action lists (titan
// pp-schedule, the executor's logs).
#include <algorithm>
#include <iomanip>
#include <sstream>

#include "titan/pipeline_program.hpp"

namespace titan {

std::string format_pipeline_order(const RankActions& actions) {
  size_t steps = 0;
  for (const auto& row : actions) steps = std::max(steps, row.size());
  const size_t label_width = std::to_string(steps == 0 ? 0 : steps - 1).size();
  std::vector<size_t> widths;
  for (size_t rank = 0; rank < actions.size(); ++rank) {
    size_t width = ("Rank " + std::to_string(rank)).size();
    for (const auto& action : actions[rank]) width = std::max(width, action.to_string().size());
    widths.push_back(width);
  }
  std::ostringstream out;
  out << std::string(label_width + 7, ' ');
  for (size_t rank = 0; rank < actions.size(); ++rank) {
    out << std::left << std::setw(static_cast<int>(widths[rank])) << ("Rank " + std::to_string(rank))
        << (rank + 1 < actions.size() ? " " : "");
  }
  out << "\n";
  for (size_t step = 0; step < steps; ++step) {
    std::string label = std::to_string(step);
    out << "Step " << std::string(label_width - label.size(), '0') << label << ": ";
    std::string line;
    for (size_t rank = 0; rank < actions.size(); ++rank) {
      std::string cell = step < actions[rank].size() ? actions[rank][step].to_string() : "";
      cell.resize(widths[rank], ' ');
      line += cell + (rank + 1 < actions.size() ? " " : "");
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out << line << "\n";
  }
  return out.str();
}

}  // namespace titan
