// Every plugin kind's interface (one per row of plugin.hpp's kind list, and
// PipelineSchedule), for code that creates and destroys objects of any
// kind: the registry and `titan plugins inspect`. A plugin includes only the
// interfaces it implements.
#pragma once
#include "titan/checkpointer.hpp"
#include "titan/comm_observer.hpp"
#include "titan/metrics_sink.hpp"
#include "titan/model.hpp"
#include "titan/optimizer.hpp"
#include "titan/parallelizer.hpp"
#include "titan/pipeline.hpp"
#include "titan/pipeline_schedule.hpp"
#include "titan/precision.hpp"
#include "titan/microbatch_runner.hpp"
