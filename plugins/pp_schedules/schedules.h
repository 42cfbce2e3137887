// The compute-only action lists of TorchTitan's schedules (PyTorch's
// torch.distributed.pipelining), one function per schedule, each a pure
// function of the shape. Shapes were checked before these run.
#pragma once
#include "titan/pipeline_schedule.hpp"

namespace titan::pp_schedules {

RankActions gpipe(const PipelineShape& shape);
RankActions one_f_one_b(const PipelineShape& shape);
RankActions interleaved_1f1b(const PipelineShape& shape);
RankActions interleaved_zero_bubble(const PipelineShape& shape);
RankActions looped_bfs(const PipelineShape& shape);
RankActions zbv_zero_bubble(const PipelineShape& shape);
RankActions dual_pipe_v(const PipelineShape& shape);

}  // namespace titan::pp_schedules
