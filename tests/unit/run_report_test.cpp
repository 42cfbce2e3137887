// The run report (`titan report`) in process: reading a run folder (a run
// still writing, a damaged line, a folder that is no run, a resumed run) and
// the page drawn from hand-written metrics with TorchTitan's key names.
#include "doctest_torch.hpp"

#include <cmath>
#include <functional>
#include <string>

#include "report/html_report.h"
#include "report/run_folder.h"
#include "report/svg_chart.h"
#include "error_of.hpp"
#include "test_support.hpp"
#include "titan/error.hpp"

namespace fs = std::filesystem;
using titan::test::has;

namespace {


// A training line as step_metrics writes it, with a loss and a throughput of the step.
std::string train_line(int step, double loss, double tps, double memory = 1.5, double loading = 2.0) {
  char line[1024];
  std::snprintf(line, sizeof(line),
                "{\"grad_norm\":%g,\"loss_metrics/global_avg_loss\":%g,\"loss_metrics/global_max_loss\":%g,"
                "\"lr\":%g,\"memory/max_active(GiB)\":%g,\"memory/max_reserved(GiB)\":%g,\"mfu(%%)\":%g,"
                "\"step\":%d,\"throughput(tps)\":%g,\"time_metrics/data_loading(%%)\":%g,"
                "\"time_metrics/elapsed(s)\":%g,\"time_metrics/end_to_end(s)\":0.5}\n",
                1.0 / step, loss, loss + 0.5, 1e-4 * step, memory, memory + 0.25, 0.1 * step, step, tps, loading,
                2.0 * step);
  return line;
}

// The text of one chart's <figure> in the page.
std::string figure(const std::string& html, const std::string& id) {
  auto start = html.find("<figure id=\"chart-" + id + "\">");
  if (start == std::string::npos) return "";
  return html.substr(start, html.find("</figure>", start) - start);
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_SUITE("run_report") {
  TEST_CASE("run report: a run still writing is read up to its last whole line, and the page says so") {
    fs::path run = titan::test::temp_dir("run_report_partial");
    titan::test::write_file(run / "metrics.jsonl", train_line(1, 8.0, 1000) + train_line(2, 7.5, 1100) +
                                                       train_line(3, 7.0, 1200) +
                                                       "{\"grad_norm\":0.3,\"loss_metrics/global_avg_loss\":6.");
    titan::test::write_file(run / "config.resolved.yaml", "training:\n  steps: 10\n");
    auto folder = titan::report::read_run_folder(run.string());
    CHECK(folder.metrics.lines == 3);
    CHECK(folder.metrics.partial_tail == "{\"grad_norm\":0.3,\"loss_metrics/global_avg_loss\":6.");
    const auto& loss = folder.metrics.series.at("loss_metrics/global_avg_loss");
    REQUIRE(loss.size() == 3);
    CHECK(loss.at(3) == 7.0);
    CHECK(folder.resolved_config == std::string("training:\n  steps: 10\n"));

    auto report = titan::report::build_report(folder);
    CHECK(report.last_step == 3);
    REQUIRE(report.notes.size() >= 1);
    const std::string expected =
        "metrics.jsonl ends in an incomplete line (" + std::to_string(folder.metrics.partial_tail.size()) + " bytes";
    CHECK_MESSAGE(has(report.notes[0], expected), report.notes[0]);
    CHECK(has(report.html, "ends in an incomplete line"));

    // Just started: no whole line yet is a page with a note, not an error.
    titan::test::write_file(run / "metrics.jsonl", "{\"step\":1,\"gr");
    auto empty = titan::report::build_report(titan::report::read_run_folder(run.string()));
    CHECK(empty.last_step == -1);
    CHECK(empty.chart_ids.empty());
    CHECK(has(empty.html, "no complete line yet"));
  }

  TEST_CASE("run report: a damaged line before the last is an error naming the file and the line") {
    fs::path run = titan::test::temp_dir("run_report_damaged");
    titan::test::write_file(run / "metrics.jsonl",
                            train_line(1, 8.0, 1000) + "{\"step\":2,\"grad_norm\":}\n" + train_line(3, 7.0, 1200));
    std::string message = titan::test::error_of([&] { titan::report::read_run_folder(run.string()); });
    CHECK_MESSAGE(has(message, (run / "metrics.jsonl").string() + ":2: expected one JSON object"), message);
    CHECK_MESSAGE(has(message, "{\"step\":2,\"grad_norm\":}"), message);

    titan::test::write_file(run / "metrics.jsonl", train_line(1, 8.0, 1000) + "\n{\"loss\": 3}\n");
    message = titan::test::error_of([&] { titan::report::read_run_folder(run.string()); });
    CHECK_MESSAGE(has(message, "metrics.jsonl:3: expected one JSON object with an integer \"step\""), message);
    CHECK_MESSAGE(has(message, "this line has no \"step\""), message);

    titan::test::write_file(run / "metrics.jsonl", "[1, 2]\n");
    message = titan::test::error_of([&] { titan::report::read_run_folder(run.string()); });
    CHECK_MESSAGE(has(message, "metrics.jsonl:1: "), message);

    // Another rank's file is read by the same rules.
    titan::test::write_file(run / "metrics.jsonl", train_line(1, 8.0, 1000));
    titan::test::write_file(run / "metrics.rank1.jsonl", train_line(1, 8.0, 1000) + "not json\n");
    message = titan::test::error_of([&] { titan::report::read_run_folder(run.string()); });
    CHECK_MESSAGE(has(message, (run / "metrics.rank1.jsonl").string() + ":2: "), message);
  }

  TEST_CASE("run report: a folder that is not a run says what a run folder holds") {
    fs::path dir = titan::test::temp_dir("run_report_not_a_run");
    std::string message = titan::test::error_of([&] { titan::report::read_run_folder(dir.string()); });
    CHECK_MESSAGE(has(message, "is not a run folder: it has no metrics.jsonl"), message);
    CHECK_MESSAGE(has(message, "`titan train` run with metrics.enable_jsonl: true"), message);

    message = titan::test::error_of([&] { titan::report::read_run_folder((dir / "missing").string()); });
    CHECK_MESSAGE(has(message, "is not a folder"), message);

    // The parent of runs: the runs inside are named.
    titan::test::write_file(dir / "run_a" / "metrics.jsonl", train_line(1, 8.0, 1000));
    message = titan::test::error_of([&] { titan::report::read_run_folder(dir.string()); });
    CHECK_MESSAGE(has(message, "these folders inside it are runs: " + (dir / "run_a").string()), message);
  }

  TEST_CASE("run report: a resumed run's relogged steps keep their last values") {
    fs::path run = titan::test::temp_dir("run_report_resumed");
    titan::test::write_file(run / "metrics.jsonl", train_line(1, 8.0, 1000) + train_line(2, 7.5, 1000) +
                                                       train_line(3, 7.0, 1000) + train_line(2, 6.5, 1000) +
                                                       train_line(3, 6.0, 1000) + train_line(4, 5.5, 1000));
    auto folder = titan::report::read_run_folder(run.string());
    CHECK(folder.metrics.relogged_steps == std::set<int64_t>{2, 3});
    const auto& loss = folder.metrics.series.at("loss_metrics/global_avg_loss");
    CHECK(loss.size() == 4);
    CHECK(loss.at(2) == 6.5);
    CHECK(loss.at(3) == 6.0);
    auto report = titan::report::build_report(folder);
    CHECK(has(report.html, "2 steps (2 to 3) were logged more than once"));
  }

  TEST_CASE("run report: the page charts every metric, each rank's spread and unknown keys, with the config escaped") {
    fs::path run = titan::test::temp_dir("run_report_page");
    std::string rank0, rank1;
    for (int step = 1; step <= 6; ++step) {
      rank0 += train_line(step, 8.0 - step * 0.5, 1000 + step * 10, 1.5, 2.0);
      rank1 += train_line(step, 8.0 - step * 0.5, 900 + step * 10, 1.75, 3.0);
      if (step % 3 == 0) {
        rank0 += "{\"step\":" + std::to_string(step) +
                 ",\"validation_metrics/loss\":" + std::to_string(7.9 - step * 0.4) +
                 ",\"validation_metrics/tps\":3000,\"validation_metrics/batches\":2}\n";
      }
    }
    // MoE routers' keys, a NaN loss (null in JSON) and a key the report does not know.
    rank0 += "{\"step\":7,\"loss_metrics/global_avg_loss\":null,\"moe/layers.0.moe.router/imbalance\":1.5,"
             "\"moe/layers.1.moe.router/imbalance\":1.25,\"note\":\"text\",\"my_metric\":3}\n";
    titan::test::write_file(run / "metrics.jsonl", rank0);
    titan::test::write_file(run / "metrics.rank1.jsonl", rank1);
    titan::test::write_file(run / "config.resolved.yaml", "job:\n  description: \"<script>alert('x')</script> & co\"\n");
    auto report = titan::report::build_report(titan::report::read_run_folder(run.string()));
    const std::string& html = report.html;

    for (const char* id : {"loss", "grad_norm", "throughput", "mfu", "memory", "data_loading", "step_time", "lr"}) {
      CAPTURE(id);
      CHECK(count(figure(html, id), "<polyline") >= 1);
    }
    // Training average and max, and validation with a dot per pass; the NaN
    // at step 7 draws nothing.
    std::string loss = figure(html, "loss");
    CHECK(has(loss, "training, global average"));
    CHECK(has(loss, "validation, step 6: 5.5"));
    CHECK(count(loss, "<polyline") == 3);
    // Each rank's tokens/s and memory, one line each.
    std::string throughput = figure(html, "throughput");
    CHECK(has(throughput, "tokens/s, rank 0"));
    CHECK(has(throughput, "tokens/s, rank 1, step 6: 960"));
    CHECK(count(figure(html, "memory"), "<polyline") == 4);
    CHECK(has(figure(html, "data_loading"), "data loading, rank 1, step 2: 3"));
    // Keys no chart names: the routers share one chart, the rest get one each.
    CHECK(has(html, "moe/*/imbalance"));
    CHECK(has(html, "layers.1.moe.router, step 7: 1.25"));
    CHECK(has(html, "my_metric, step 7: 3"));
    bool listed = false;
    for (const auto& note : report.notes) listed |= has(note, "keys without numbers, not charted: note");
    CHECK(listed);

    // Summary: last step, loss, tokens/s and wall time of the last line that has them.
    CHECK(report.last_step == 7);
    CHECK(has(html, "<dt>steps</dt><dd>7</dd>"));
    CHECK(has(html, "<dt>final tokens/s per device</dt><dd>1060</dd>"));
    CHECK(has(html, "<dt>wall time</dt><dd>12.0 s</dd>"));
    CHECK(has(html, "<dt>ranks with metrics</dt><dd>2</dd>"));

    // Self-contained and escaped: the config is text, no script, nothing fetched.
    CHECK(has(html, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; co"));
    CHECK_FALSE(has(html, "<script"));
    CHECK_FALSE(has(html, "src="));
    CHECK_FALSE(has(html, "href="));
    CHECK_FALSE(has(html, "url("));
  }

  TEST_CASE("run report: more ranks than lines draw a min-max band with rank 0's line") {
    fs::path run = titan::test::temp_dir("run_report_band");
    for (int rank = 0; rank < 6; ++rank) {
      std::string lines;
      for (int step = 1; step <= 3; ++step) lines += train_line(step, 7.0, 1000 + rank * 100 + step);
      titan::test::write_file(run / (rank == 0 ? "metrics.jsonl" : "metrics.rank" + std::to_string(rank) + ".jsonl"),
                              lines);
    }
    auto folder = titan::report::read_run_folder(run.string());
    CHECK(folder.other_ranks.size() == 5);
    auto report = titan::report::build_report(folder);
    std::string throughput = figure(report.html, "throughput");
    CHECK(count(throughput, "class=\"band\"") == 1);
    CHECK(has(throughput, "tokens/s, min-max of 6 ranks"));
    CHECK(count(throughput, "<polyline") == 1);
  }

  TEST_CASE("run report: a chart breaks its line at NaN, and numbers are short") {
    titan::report::Chart chart;
    chart.title = "a <b>";
    chart.lines.push_back({"x", {{1, 1.0}, {2, 2.0}, {3, NAN}, {4, 3.0}, {5, 4.0}}});
    std::string svg = titan::report::render_svg(chart, 400);
    CHECK(count(svg, "<polyline") == 2);
    CHECK(count(svg, "<circle") == 4);
    CHECK(has(svg, "a &lt;b&gt;"));
    CHECK(titan::report::format_number(1234.4) == "1234");
    CHECK(titan::report::format_number(12346) == "12.35k");
    CHECK(titan::report::format_number(2.5e9) == "2.5G");
    CHECK(titan::report::format_number(0.0003) == "0.0003");
    CHECK(titan::report::format_number(1e-5) == "1e-5");
    CHECK(titan::report::format_number(NAN) == "NaN");
  }
}
