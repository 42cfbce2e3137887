// Where a run computes and with how many CPU threads: shared by training
// and by the commands that only run a model (generation).
#pragma once
#include <c10/core/Device.h>

#include "titan/job_config.hpp"

namespace titan {

// training.device: the CPU, or the first GPU where this titan has CUDA
// (else an error saying why and what to set).
c10::Device training_device(const TrainingConfig& training);
// training.threads (0: OMP_NUM_THREADS where a launcher set it, else every
// core; LibTorch starts with one here), the
// global seed, and deterministic algorithms when asked.
void set_threads_and_seed(const TrainingConfig& training);

}  // namespace titan
