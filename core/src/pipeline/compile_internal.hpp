// Shared by plan.cpp and csv.cpp: the last step of every plan.
#pragma once
#include <string>

#include "titan/pipeline_program.hpp"

namespace titan::pipeline_detail {

// Checks the full lists and packs the plan.
PipelineProgram finish_plan(std::string label, StagePlacement placement, const PipelineShape& shape, RankActions compute,
                         RankActions actions);

}  // namespace titan::pipeline_detail
