// The fault matrix (docs/reliability.md): FSDP on 2 Gloo ranks under `titan
// launch --max-restarts 1`; one rank is killed (SIGKILL) or frozen
// (SIGSTOP) at one phase of training. Every cell must end its failed
// attempt within the configured timeouts with a message naming the faulty
// rank, leave a flight-recorder dump (once collectives have run), resume
// from the newest complete checkpoint and finish bit for bit equal to the
// uninterrupted run. The suite runs a few cells covering every phase kind;
// TITAN_FAULT_MATRIX=full runs all 28 and prints the table.
#include "doctest_torch.hpp"
#include "test_support.hpp"

#include <chrono>
#include <regex>

namespace {

namespace fs = std::filesystem;
using titan::test::run_command;

struct Cell {
  std::string signal;  // KILL or STOP
  int rank;
  std::string phase;
  bool async_save = false;
};

std::string cell_name(const Cell& cell) {
  return cell.signal + " rank " + std::to_string(cell.rank) + " " + cell.phase + (cell.async_save ? " (async)" : "");
}

// A tiny job: 6 steps, checkpoints at 2, 4 and 6, short timeouts.
std::string job(const fs::path& dump, bool async_save) {
  return titan::test::titan_binary() + " train " + titan::test::source_dir() +
         "/configs/llama3_debugmodel.yaml --set model.dim=64 --set model.n_layers=2 --set model.n_heads=4"
         " --set training.seq_len=32 --set training.threads=1 --set training.local_batch_size=4"
         " --set training.steps=6 --set metrics.log_freq=1 --set checkpoint.enable=true"
         " --set checkpoint.interval=2 --set checkpoint.keep_latest_k=0 --set comm.train_timeout_seconds=15"
         " --set comm.init_timeout_seconds=15 --set 'plugins=[{name: fsdp}, {name: flight_recorder}]'"
         " --set checkpoint.async_mode=" + std::string(async_save ? "async" : "disabled") +
         " --set debug.save_final_model=" + (dump / "final.pt").string() + " --set job.dump_folder=" + dump.string();
}

std::string launch(const std::string& env, int port, const std::string& program) {
  return env + " timeout 120 " + titan::test::titan_binary() + " launch --nproc-per-node 2 --master-port " +
         std::to_string(port) + " --grace-period-s 2 --max-restarts 1 -- " + program;
}

struct CellResult {
  bool ok = false;
  double seconds = 0;
  std::string failure;    // what went wrong, empty when ok
  std::string named;      // the launcher's line naming the faulty rank
  int64_t resumed_from = -1;
  bool dumped = false;
};

// The step the fault hits: training phases at step 3, the checkpoint
// phases while step 4 is saved; the newest complete checkpoint is then 2
// (or 4 when rank 0 had already committed it). At startup there is none:
// the restart begins afresh (resumed_from -1).
int64_t fault_step(const Cell& cell) { return cell.phase.rfind("checkpoint", 0) == 0 ? 4 : 3; }

CellResult run_cell(const Cell& cell, int port, const std::string& reference_final) {
  CellResult out;
  fs::path dump = titan::test::temp_dir("fault_" + std::to_string(port));
  std::string env = "TITAN_TEST_SIGNAL=" + cell.signal + ":rank=" + std::to_string(cell.rank) +
                    ":phase=" + cell.phase + ":step=" + std::to_string(fault_step(cell));
  auto start = std::chrono::steady_clock::now();
  auto result = run_command(launch(env, port, job(dump, cell.async_save)));
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string& log = result.output;
  std::smatch match;
  std::regex named("titan launch: (rank " + std::to_string(cell.rank) + " \\(pid [0-9]+\\) (was killed by signal 9|is stopped)[^\\n]*)");
  if (std::regex_search(log, match, named)) out.named = match[1];
  std::regex resumed("resumed from checkpoint at step ([0-9]+)");
  if (std::regex_search(log, match, resumed)) out.resumed_from = std::stoll(match[1]);
  out.dumped = fs::exists(dump / "flight_recorder") && !fs::is_empty(dump / "flight_recorder");
  const bool commit_phase = cell.phase == "checkpoint_commit";
  if (result.exit_code != 0) {
    out.failure = "the job failed after its restart (exit " + std::to_string(result.exit_code) + ")";
  } else if (log.find("TITAN_TEST_SIGNAL: raising") == std::string::npos) {
    out.failure = "the fault never fired";
  } else if (out.named.empty()) {
    out.failure = "no launcher line names rank " + std::to_string(cell.rank);
  } else if (cell.phase == "startup" ? out.resumed_from != -1
                                     : !(out.resumed_from == 2 || (commit_phase && out.resumed_from == 4))) {
    out.failure = out.resumed_from == -1 ? "the restart did not resume from a checkpoint"
                                         : "resumed from step " + std::to_string(out.resumed_from) +
                                               ", not the newest complete checkpoint";
  } else if (cell.phase != "startup" && !out.dumped) {
    out.failure = "no flight-recorder dump";
  } else if (titan::test::read_file(dump / "final.pt") != reference_final) {
    out.failure = "the resumed run's final parameters differ from the uninterrupted run's";
  } else {
    out.ok = true;
  }
  if (!out.ok) MESSAGE(cell_name(cell) << ": " << out.failure << "\n" << log);
  return out;
}

}  // namespace

TEST_CASE("fault matrix: a rank killed or frozen at each phase ends the attempt naming it, and the restart resumes "
          "bit for bit") {
  // The uninterrupted run every cell must reproduce.
  fs::path reference = titan::test::temp_dir("fault_reference");
  auto straight = run_command(launch("", 29720, job(reference, false)));
  INFO(straight.output);
  REQUIRE(straight.exit_code == 0);
  const std::string reference_final = titan::test::read_file(reference / "final.pt");

  const bool full = titan::test::env_or("TITAN_FAULT_MATRIX", "") == "full";
  std::vector<Cell> cells;
  if (full) {
    for (const char* signal : {"KILL", "STOP"}) {
      for (int rank : {0, 1}) {
        for (const char* phase :
             {"startup", "forward", "backward", "optimizer", "checkpoint_write", "checkpoint_commit"}) {
          cells.push_back({signal, rank, phase});
        }
        cells.push_back({signal, rank, "checkpoint_write", /*async_save=*/true});
      }
    }
  } else {
    // One cell per kind of phase: before the rendezvous, inside a step,
    // between steps, while a save is written, committed, and in flight.
    cells = {{"STOP", 1, "startup"},
             {"KILL", 1, "backward"},
             {"STOP", 0, "optimizer"},
             {"KILL", 0, "checkpoint_commit"},
             {"KILL", 1, "checkpoint_write", true}};
  }
  std::string table = "| signal | rank | phase | result | seconds | named by the launcher | resumed from | dump |\n"
                      "|---|---|---|---|---|---|---|---|\n";
  int port = full ? 29740 : 29721;
  for (const Cell& cell : cells) {
    CellResult result = run_cell(cell, port++, reference_final);
    CHECK_MESSAGE(result.ok, cell_name(cell), ": ", result.failure);
    char line[512];
    std::snprintf(line, sizeof(line), "| %s | %d | %s%s | %s | %.1f | %s | %lld | %s |\n", cell.signal.c_str(),
                  cell.rank, cell.phase.c_str(), cell.async_save ? " (async save)" : "",
                  result.ok ? "bit-exact resume" : result.failure.c_str(), result.seconds, result.named.c_str(),
                  static_cast<long long>(result.resumed_from), result.dumped ? "yes" : "no");
    table += line;
  }
  MESSAGE("fault matrix (" << cells.size() << " cells):\n" << table);
}
