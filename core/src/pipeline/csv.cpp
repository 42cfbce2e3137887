// User schedules from CSV (pipeline_parallel_schedule_csv), in PyTorch's
// format: one row per rank, comma-separated actions. A bad cell is refused
// with its file, row, column and text; the lists then go through the same
// static check as a plugin's.
#include <fstream>

#include "compile_internal.hpp"
#include "titan/error.hpp"
#include "titan/pipeline_program.hpp"

namespace titan {

namespace {

std::string cell_at(const CsvSchedule& csv, size_t rank, size_t index) {
  return csv.path + ": row " + std::to_string(rank + 1) + " (rank " + std::to_string(rank) + "), column " +
         std::to_string(csv.columns[rank][index]) + " ('" + csv.rows[rank][index].to_string() + "')";
}

// The first action (rank, index) whose stage the placement puts elsewhere; {-1, -1} when all fit.
std::pair<int64_t, int64_t> first_misplaced(const CsvSchedule& csv, StagePlacement placement, const PipelineShape& shape) {
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    for (size_t i = 0; i < csv.rows[r].size(); ++i) {
      const int64_t stage = csv.rows[r][i].stage;
      if (stage >= shape.stages || stage_to_rank(placement, shape, stage) != static_cast<int64_t>(r)) {
        return {static_cast<int64_t>(r), static_cast<int64_t>(i)};
      }
    }
  }
  return {-1, -1};
}

// loop when every row runs only its loop stages, else v when that fits (two stages per rank).
StagePlacement choose_placement(const CsvSchedule& csv, const PipelineShape& shape) {
  auto loop = first_misplaced(csv, StagePlacement::loop, shape);
  if (loop.first < 0) return StagePlacement::loop;
  if (shape.stages == 2 * shape.ranks && first_misplaced(csv, StagePlacement::v, shape).first < 0) {
    return StagePlacement::v;
  }
  const auto r = static_cast<size_t>(loop.first);
  const auto i = static_cast<size_t>(loop.second);
  const int64_t stage = csv.rows[r][i].stage;
  std::string owner = stage < shape.stages ? "rank " + std::to_string(stage_to_rank(StagePlacement::loop, shape, stage))
                                           : "no rank (" + std::to_string(shape.stages) + " stages)";
  throw Error(cell_at(csv, r, i) + ": stage " + std::to_string(stage) + " belongs to " + owner +
              " under the loop placement (rank r holds r, r+pp, ...), and the v placement (rank r holds r and "
              "2pp-1-r) does not fit the file either; each row must run only its rank's stages");
}

}  // namespace

CsvSchedule read_schedule_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(std::string(kScheduleCsvKey) + ": cannot read '" + path + "'");
  CsvSchedule csv;
  csv.path = path;
  std::string line;
  for (int64_t line_number = 1; std::getline(in, line); ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are not ranks
    const size_t rank = csv.rows.size();
    csv.rows.emplace_back();
    csv.columns.emplace_back();
    size_t begin = 0;
    for (int64_t column = 1;; ++column) {
      const size_t comma = line.find(',', begin);
      std::string cell = line.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
      size_t first = cell.find_first_not_of(" \t\r\"");
      if (first != std::string::npos) {
        cell = cell.substr(first, cell.find_last_not_of(" \t\r\"") - first + 1);
        try {
          csv.rows[rank].push_back(Action::parse(cell));
        } catch (const Error& error) {
          throw Error(path + ": row " + std::to_string(rank + 1) + " (rank " + std::to_string(rank) + ", line " +
                      std::to_string(line_number) + "), column " + std::to_string(column) + ": " + error.what());
        }
        csv.columns[rank].push_back(column);
        const Action& action = csv.rows[rank].back();
        csv.has_comm = csv.has_comm || !is_compute(action.type);
        csv.shape.stages = std::max(csv.shape.stages, action.stage + 1);
        csv.shape.microbatches = std::max(csv.shape.microbatches, action.microbatch + 1);
      }
      if (comma == std::string::npos) break;
      begin = comma + 1;
    }
  }
  if (csv.rows.empty()) throw Error(path + ": no rows; expected one row of actions per pipeline rank (e.g. 0F0,0F1,0B0,0B1)");
  csv.shape.ranks = static_cast<int64_t>(csv.rows.size());
  if (csv.shape.stages % csv.shape.ranks != 0) {
    // Rows hold whole stages: round up so that every rank holds as many (an unused stage is named by the checker).
    csv.shape.stages += csv.shape.ranks - csv.shape.stages % csv.shape.ranks;
  }
  csv.placement = choose_placement(csv, csv.shape);
  return csv;
}

PipelineProgram compile_pipeline_csv(const CsvSchedule& csv, const PipelineShape& shape) {
  const std::string label = std::string(kScheduleCsvKey) + " " + csv.path;
  auto differs = [&](const std::string& key, int64_t run, const std::string& what, int64_t file) {
    throw Error(label + " " + what + " " + std::to_string(file) + ", but " + key + " gives " + std::to_string(run) +
                "; write the schedule for the run's shape or change " + key);
  };
  if (shape.ranks != csv.shape.ranks) differs(kPipelineDegreeKey, shape.ranks, "has rows (ranks):", csv.shape.ranks);
  if (shape.stages % shape.ranks != 0) {
    throw Error(std::string(kLayersPerStageKey) + " gives " + std::to_string(shape.stages) +
                " stages, not a multiple of " + kPipelineDegreeKey + " = " + std::to_string(shape.ranks));
  }
  for (size_t r = 0; r < csv.rows.size(); ++r) {
    for (size_t i = 0; i < csv.rows[r].size(); ++i) {
      if (csv.rows[r][i].stage >= shape.stages) {
        throw Error(cell_at(csv, r, i) + ": stage " + std::to_string(csv.rows[r][i].stage) + " does not exist: " +
                    kLayersPerStageKey + " gives " + std::to_string(shape.stages) + " stages");
      }
      if (csv.rows[r][i].microbatch >= shape.microbatches) {
        throw Error(cell_at(csv, r, i) + ": microbatch " + std::to_string(csv.rows[r][i].microbatch) +
                    " does not exist: " + kMicrobatchesKey + " is " + std::to_string(shape.microbatches));
      }
    }
  }
  const StagePlacement placement = choose_placement(csv, shape);
  RankActions compute;
  RankActions actions = csv.rows;
  if (!csv.has_comm) {
    compute = csv.rows;
    actions = lower_to_comm(csv.rows, placement, shape);
  } else {
    compute.resize(csv.rows.size());
    for (size_t r = 0; r < csv.rows.size(); ++r) {
      for (const Action& action : csv.rows[r]) {
        if (is_compute(action.type)) compute[r].push_back(action);
      }
    }
  }
  PipelineProgram program = pipeline_detail::finish_program(label, placement, shape, std::move(compute), std::move(actions));
  program.name = csv.path;
  return program;
}

}  // namespace titan
