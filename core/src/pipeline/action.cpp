// Actions, placements and shapes of the pipeline schedule contract: their
// PyTorch spellings, parsing, and which rank holds which stage.
#include <cctype>
#include <iomanip>
#include <sstream>

#include "titan/error.hpp"
#include "titan/pipeline_schedule.hpp"

namespace titan {

namespace {

struct TypeCode {
  ActionType type;
  const char* code;
};
// Longest codes first, so that "SEND_F" is not read as an unknown "S".
constexpr TypeCode kCodes[] = {
    {ActionType::send_forward, "SEND_F"},    {ActionType::recv_forward, "RECV_F"},
    {ActionType::send_backward, "SEND_B"},   {ActionType::recv_backward, "RECV_B"},
    {ActionType::forward, "F"},              {ActionType::backward_input, "I"},
    {ActionType::backward_weight, "W"},      {ActionType::full_backward, "B"},
};

const char* kActionGrammar =
    "expected <stage><type><microbatch> with type one of F, I, W, B, SEND_F, RECV_F, SEND_B, RECV_B (e.g. 0F3, "
    "1SEND_B2)";

}  // namespace

const char* action_type_code(ActionType type) {
  for (const auto& entry : kCodes) {
    if (entry.type == type) return entry.code;
  }
  return "?";
}

bool is_compute(ActionType type) {
  return type == ActionType::forward || type == ActionType::backward_input || type == ActionType::backward_weight ||
         type == ActionType::full_backward;
}

std::string Action::to_string() const { return std::to_string(stage) + action_type_code(type) + std::to_string(microbatch); }

Action Action::parse(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  size_t end = text.find_last_not_of(" \t\r\n");
  std::string body = begin == std::string::npos ? "" : text.substr(begin, end - begin + 1);
  auto fail = [&](const std::string& why) -> Action {
    throw Error("action '" + body + "': " + why + "; " + kActionGrammar);
  };
  size_t digits = 0;
  while (digits < body.size() && std::isdigit(static_cast<unsigned char>(body[digits]))) ++digits;
  if (digits == 0) return fail("no stage number at its start");
  for (const auto& entry : kCodes) {
    std::string code = entry.code;
    if (body.compare(digits, code.size(), code) != 0) continue;
    std::string tail = body.substr(digits + code.size());
    if (tail.empty()) return fail("no microbatch number after '" + code + "'");
    for (char c : tail) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return fail("'" + tail + "' is not a microbatch number");
    }
    if (digits > 9 || tail.size() > 9) return fail("number out of range");
    return Action{entry.type, std::stoll(body.substr(0, digits)), std::stoll(tail)};
  }
  std::string type = body.substr(digits);
  for (const char* other : {"UNSHARD", "RESHARD", "REDUCE_GRAD", "OVERLAP_F_B"}) {
    if (type.rfind(other, 0) == 0) {
      return fail(std::string("'") + other +
                  "' is PyTorch-only: Titan's data-parallel plugins unshard, reshard and reduce gradients "
                  "themselves, and overlapped F+B is written as its F and its B");
    }
  }
  return fail("unknown action type '" + type + "'");
}

const char* placement_name(StagePlacement placement) { return placement == StagePlacement::v ? "v" : "loop"; }

std::string PipelineShape::to_string() const {
  return "pp " + std::to_string(ranks) + ", " + std::to_string(stages) + " stage" + (stages == 1 ? "" : "s") + ", " +
         std::to_string(microbatches) + " microbatch" + (microbatches == 1 ? "" : "es");
}

int64_t stage_to_rank(StagePlacement placement, const PipelineShape& shape, int64_t stage) {
  if (stage < 0 || stage >= shape.stages) {
    throw Error("stage " + std::to_string(stage) + " is out of range: the pipeline has " +
                std::to_string(shape.stages) + " stages (0.." + std::to_string(shape.stages - 1) + ")");
  }
  if (shape.ranks < 1 || shape.stages % shape.ranks != 0) {
    throw Error(std::string(kPipelineDegreeKey) + " = " + std::to_string(shape.ranks) + " does not divide the " +
                std::to_string(shape.stages) + " stages");
  }
  if (placement == StagePlacement::loop) return stage % shape.ranks;
  if (shape.stages != 2 * shape.ranks) {
    throw Error("the v placement needs exactly 2 stages per rank, got " + std::to_string(shape.stages) +
                " stages on " + std::to_string(shape.ranks) + " ranks");
  }
  return stage < shape.ranks ? stage : 2 * shape.ranks - 1 - stage;
}

std::vector<int64_t> rank_to_stages(StagePlacement placement, const PipelineShape& shape, int64_t rank) {
  if (rank < 0 || rank >= shape.ranks) {
    throw Error("rank " + std::to_string(rank) + " is out of range: " + kPipelineDegreeKey + " is " +
                std::to_string(shape.ranks));
  }
  std::vector<int64_t> stages;
  for (int64_t stage = 0; stage < shape.stages; ++stage) {
    if (stage_to_rank(placement, shape, stage) == rank) stages.push_back(stage);
  }
  return stages;
}


}  // namespace titan
