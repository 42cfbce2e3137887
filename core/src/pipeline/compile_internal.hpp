// Shared by compile.cpp and csv.cpp: the last step of every program.
#pragma once
#include <string>

#include "titan/pipeline_program.hpp"

namespace titan::pipeline_detail {

// Checks the full lists and packs the program.
PipelineProgram finish_program(std::string label, StagePlacement placement, const PipelineShape& shape, RankActions compute,
                         RankActions actions);

}  // namespace titan::pipeline_detail
