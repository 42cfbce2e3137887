// The lr_schedules plugin, loaded through the registry, gives TorchTitan's
// warmup-stable-decay factors: factor(step) == lambda(step - 1). Expected
// values are worked out by hand from TorchTitan's lr_scheduler.py (and its
// unit tests, whose tables appear here with their 0-based step + 1).
#include "doctest_torch.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "titan/config.hpp"
#include "titan/error.hpp"
#include "titan/optimizer.hpp"
#include "titan/registry.hpp"

namespace {

std::unique_ptr<titan::LrSchedule> schedule(const std::string& yaml, int64_t training_steps) {
  titan::PluginContext context;
  context.options = titan::ConfigNode::parse(yaml, "test.yaml");
  context.training_steps = training_steps;
  return titan::PluginRegistry::instance().create_lr_schedule("lr_schedules", context);
}

// factor(1), factor(2), ... compared with the expected table.
void check_factors(const titan::LrSchedule& lr, const std::vector<double>& expected) {
  for (size_t i = 0; i < expected.size(); ++i) {
    int64_t step = static_cast<int64_t>(i) + 1;
    CAPTURE(step);
    CHECK(lr.factor(step) == doctest::Approx(expected[i]).epsilon(1e-12));
  }
}

}  // namespace

TEST_CASE("lr_schedules: linear warmup then linear decay over every step after it (decay_ratio absent)") {
  // TorchTitan test_linear_warmup_decay: 10 steps, warmup 2; decay 8 steps,
  // 1 virtual stable step, so the last step is at 1/8, not 0.
  auto lr = schedule("warmup_steps: 2\n", 10);
  check_factors(*lr, {0.5, 1.0, 1.0, 7.0 / 8, 6.0 / 8, 5.0 / 8, 4.0 / 8, 3.0 / 8, 2.0 / 8, 1.0 / 8});
  CHECK(lr->factor(11) == doctest::Approx(0.0));  // the step after the horizon reaches the minimum
  CHECK(lr->factor(50) == doctest::Approx(0.0));  // and stays there
  // An explicit null is TorchTitan's None too, and 1 leads to the same phases.
  check_factors(*schedule("warmup_steps: 2\ndecay_ratio: null\n", 10), {0.5, 1.0, 1.0, 7.0 / 8, 6.0 / 8});
  check_factors(*schedule("warmup_steps: 2\ndecay_ratio: 1.0\n", 10), {0.5, 1.0, 1.0, 7.0 / 8, 6.0 / 8});
}

TEST_CASE("lr_schedules: warmup, stable, then decay over the last decay_ratio of the steps") {
  // TorchTitan test_warmup_stable_decay: decay_ratio 0.5 -> 5 decay steps.
  check_factors(*schedule("warmup_steps: 2\ndecay_ratio: 0.5\ndecay_type: linear\n", 10),
                {0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 0.8, 0.6, 0.4, 0.2});
  // decay_ratio 0: warmup then constant.
  check_factors(*schedule("warmup_steps: 2\ndecay_ratio: 0.0\n", 10),
                {0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0});
  // decay steps = round(10 * 0.25) = round(2.5) = 2 (Python rounds half to
  // even); stable = 10 + 1 - 2 - 2 = 7, so decay starts at step 10 with 1/2.
  check_factors(*schedule("warmup_steps: 2\ndecay_ratio: 0.25\n", 10),
                {0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5});
}

TEST_CASE("lr_schedules: warmup longer than training, and warmup + decay longer than training, are clamped") {
  // TorchTitan test_warmup_exceeds_training: warmup 10 > 5 steps -> 5.
  check_factors(*schedule("warmup_steps: 10\n", 5), {0.2, 0.4, 0.6, 0.8, 1.0});
  // TorchTitan test_warmup_plus_decay_exceeds_training: decay 8 -> 10 - 5 = 5.
  check_factors(*schedule("warmup_steps: 5\ndecay_ratio: 0.8\n", 10),
                {0.2, 0.4, 0.6, 0.8, 1.0, 1.0, 0.8, 0.6, 0.4, 0.2});
  // No warmup: decay starts right after the one virtual stable step.
  check_factors(*schedule("warmup_steps: 0\n", 4), {1.0, 0.75, 0.5, 0.25});
}

TEST_CASE("lr_schedules: sqrt and cosine decay, and min_lr_factor") {
  // 10 steps, warmup 2: warmup_stable = 3, decay 8; progress(step) = (step - 3) / 8.
  auto sqrt_lr = schedule("warmup_steps: 2\ndecay_type: sqrt\n", 10);
  CHECK(sqrt_lr->factor(2) == doctest::Approx(1.0));
  CHECK(sqrt_lr->factor(4) == doctest::Approx(1 - std::sqrt(1.0 / 8)));
  CHECK(sqrt_lr->factor(7) == doctest::Approx(1 - std::sqrt(4.0 / 8)));
  CHECK(sqrt_lr->factor(10) == doctest::Approx(1 - std::sqrt(7.0 / 8)));

  auto cosine_lr = schedule("warmup_steps: 2\ndecay_type: cosine\nmin_lr_factor: 0.1\n", 10);
  CHECK(cosine_lr->factor(1) == doctest::Approx(0.5));  // warmup is not scaled by the minimum
  CHECK(cosine_lr->factor(3) == doctest::Approx(1.0));
  CHECK(cosine_lr->factor(6) == doctest::Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 3.0 / 8))));
  CHECK(cosine_lr->factor(7) == doctest::Approx(0.55));  // progress 1/2: half way to the minimum
  CHECK(cosine_lr->factor(11) == doctest::Approx(0.1));

  // TorchTitan test_min_lr: linear to 0.2; the last step is 0.2 + 0.8 / 8.
  auto min_lr = schedule("warmup_steps: 2\nmin_lr_factor: 0.2\n", 10);
  CHECK(min_lr->factor(10) == doctest::Approx(0.3));
  CHECK(min_lr->factor(11) == doctest::Approx(0.2));

  // WSD with cosine and a minimum: 20 steps, warmup 4, decay round(20 * 0.3) = 6,
  // stable 20 + 1 - 4 - 6 = 11; step 18 -> progress (18 - 15) / 6.
  auto wsd = schedule("warmup_steps: 4\ndecay_ratio: 0.3\ndecay_type: cosine\nmin_lr_factor: 0.25\n", 20);
  CHECK(wsd->factor(2) == doctest::Approx(0.5));
  CHECK(wsd->factor(15) == doctest::Approx(1.0));
  CHECK(wsd->factor(18) == doctest::Approx(0.25 + 0.75 * 0.5 * (1 + std::cos(M_PI * 0.5))));
  CHECK(wsd->factor(20) == doctest::Approx(0.25 + 0.75 * 0.5 * (1 + std::cos(M_PI * 5.0 / 6))));
}

TEST_CASE("lr_schedules: TorchTitan's defaults (warmup 200, linear to 0) and the total_steps horizon") {
  auto lr = schedule("{}", 1000);
  CHECK(lr->factor(1) == doctest::Approx(1.0 / 200));
  CHECK(lr->factor(100) == doctest::Approx(0.5));
  CHECK(lr->factor(200) == doctest::Approx(1.0));
  CHECK(lr->factor(201) == doctest::Approx(1.0));  // the virtual stable step
  CHECK(lr->factor(202) == doctest::Approx(1 - 1.0 / 800));
  CHECK(lr->factor(1000) == doctest::Approx(1.0 / 800));

  // total_steps keeps a 10-step curve in a 5-step run.
  check_factors(*schedule("warmup_steps: 2\ntotal_steps: 10\n", 5), {0.5, 1.0, 1.0, 7.0 / 8, 6.0 / 8});
}

TEST_CASE("lr_schedules: bad options are config errors naming the key, and a missing horizon is an error") {
  const std::pair<const char*, const char*> bad[] = {
      {"warmup_steps: -1\n", "warmup_steps"},   {"warmup_steps: 2.5\n", "warmup_steps"},
      {"decay_ratio: 1.5\n", "decay_ratio"},    {"decay_ratio: -0.1\n", "decay_ratio"},
      {"min_lr_factor: -0.1\n", "min_lr_factor"}, {"min_lr_factor: 2\n", "min_lr_factor"},
      {"decay_type: exponential\n", "decay_type"}, {"total_steps: -5\n", "total_steps"}};
  for (const auto& [yaml, key] : bad) {
    CAPTURE(yaml);
    CHECK_THROWS_WITH_AS(schedule(yaml, 100), doctest::Contains(key), titan::ConfigError);
    CHECK_THROWS_WITH_AS(schedule(yaml, 100), doctest::Contains("test.yaml:1:"), titan::ConfigError);
  }
  CHECK_THROWS_WITH_AS(schedule("{}", 0), doctest::Contains("training.steps"), titan::Error);
  CHECK_THROWS_AS(schedule("{}", 10)->factor(0), titan::Error);

  titan::PluginContext context;
  context.options = titan::ConfigNode::parse("warmup_step: 10\n", "test.yaml");
  context.training_steps = 10;
  titan::PluginRegistry::instance().create_lr_schedule("lr_schedules", context);
  CHECK_THROWS_WITH_AS(context.options.check_unknown_keys(), doctest::Contains("warmup_step"), titan::ConfigError);
  std::vector<std::string> keys;
  for (const auto& doc : context.options.documented()) keys.push_back(doc.key);
  CHECK(keys == std::vector<std::string>{"warmup_steps", "decay_ratio", "decay_type", "min_lr_factor", "total_steps"});
}
