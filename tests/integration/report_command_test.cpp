// `titan report` on a real run: FSDP on 2 ranks with validation and every
// rank's metrics saved, then the page opened in headless Chromium, whose
// screenshot (in the test's folder) must show the charts drawn.
#include "doctest_torch.hpp"

#include <zlib.h>

#include <cstdint>
#include <set>
#include <vector>

#include "test_support.hpp"

namespace fs = std::filesystem;
using titan::test::has;

namespace {

struct Image {
  uint32_t width = 0, height = 0;
  std::vector<uint32_t> pixels;  // 0xRRGGBB, row by row
};

uint32_t big_endian(const std::string& bytes, size_t at) {
  uint32_t value = 0;
  for (size_t i = 0; i < 4; ++i) value = (value << 8) | uint8_t(bytes[at + i]);
  return value;
}

int paeth(int a, int b, int c) {
  int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

// An 8-bit RGB or RGBA PNG, not interlaced (what Chromium writes); fails the
// test on anything else.
Image decode_png(const std::string& file) {
  REQUIRE_MESSAGE(file.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0, "not a PNG");
  Image image;
  int channels = 0;
  std::string compressed;
  for (size_t at = 8; at + 8 <= file.size();) {
    uint32_t length = big_endian(file, at);
    std::string type = file.substr(at + 4, 4);
    REQUIRE(at + 12 + length <= file.size());
    if (type == "IHDR") {
      image.width = big_endian(file, at + 8);
      image.height = big_endian(file, at + 12);
      int depth = uint8_t(file[at + 16]), colour = uint8_t(file[at + 17]), interlace = uint8_t(file[at + 20]);
      REQUIRE_MESSAGE((depth == 8 && (colour == 2 || colour == 6) && interlace == 0),
                      "PNG depth " << depth << " colour type " << colour << " interlace " << interlace);
      channels = colour == 6 ? 4 : 3;
    } else if (type == "IDAT") {
      compressed += file.substr(at + 8, length);
    }
    at += 12 + length;
  }
  const size_t stride = size_t(image.width) * channels;
  std::vector<uint8_t> raw((stride + 1) * image.height);
  uLongf raw_size = raw.size();
  REQUIRE(uncompress(raw.data(), &raw_size, reinterpret_cast<const Bytef*>(compressed.data()), compressed.size()) ==
          Z_OK);
  REQUIRE(raw_size == raw.size());
  std::vector<uint8_t> previous(stride, 0), row(stride);
  for (uint32_t y = 0; y < image.height; ++y) {
    const uint8_t* line = &raw[y * (stride + 1)];
    for (size_t x = 0; x < stride; ++x) {
      int a = x >= size_t(channels) ? row[x - channels] : 0, b = previous[x];
      int c = x >= size_t(channels) ? previous[x - channels] : 0;
      int predictor = 0;
      switch (line[0]) {
        case 0: predictor = 0; break;
        case 1: predictor = a; break;
        case 2: predictor = b; break;
        case 3: predictor = (a + b) / 2; break;
        case 4: predictor = paeth(a, b, c); break;
        default: FAIL("PNG row filter " << int(line[0]));
      }
      row[x] = uint8_t(line[1 + x] + predictor);
    }
    for (uint32_t x = 0; x < image.width; ++x) {
      const uint8_t* p = &row[x * channels];
      image.pixels.push_back((uint32_t(p[0]) << 16) | (uint32_t(p[1]) << 8) | p[2]);
    }
    previous = row;
  }
  return image;
}

std::string figure(const std::string& html, const std::string& id) {
  auto start = html.find("<figure id=\"chart-" + id + "\">");
  if (start == std::string::npos) return "";
  return html.substr(start, html.find("</figure>", start) - start);
}

}  // namespace

TEST_SUITE("report_command") {
  TEST_CASE("report: a real 2-rank run's page opens in headless Chromium with every chart drawn") {
    auto chromium = titan::test::run_command("command -v chromium");
    if (chromium.exit_code != 0) {
      MESSAGE("TITAN_SKIPPED: chromium is not installed (scripts/setup.sh installs Debian's chromium)");
      return;
    }
    fs::path dir = titan::test::temp_dir("report_command");
    fs::path dump = dir / "run";
    auto train = titan::test::run_command(
        "timeout 300 " + titan::test::titan_binary() +
        " launch --nproc-per-node 2 --master-port 29752 --grace-period-s 5 -- " + titan::test::titan_binary() +
        " train " + titan::test::source_dir() +
        "/configs/llama3_debugmodel.yaml --set model.dim=64 --set model.n_layers=2 --set model.n_heads=4"
        " --set training.seq_len=32 --set training.threads=1 --set training.steps=6"
        " --set training.local_batch_size=2 --set checkpoint.enable=false --set metrics.log_freq=1"
        " --set metrics.save_for_all_ranks=true --set validation.enable=true --set validation.freq=3"
        " --set validation.steps=2 --set 'plugins=[{name: fsdp}]' --set job.dump_folder=" +
        dump.string());
    REQUIRE_MESSAGE(train.exit_code == 0, train.output);
    REQUIRE(fs::exists(dump / "metrics.rank1.jsonl"));

    auto report = titan::test::run_command(titan::test::titan_binary() + " report " + dump.string());
    REQUIRE_MESSAGE(report.exit_code == 0, report.output);
    CHECK_MESSAGE(has(report.output, "wrote " + (dump / "report.html").string() + ": "), report.output);
    CHECK_MESSAGE(has(report.output, "up to step 6"), report.output);
    const std::string html = titan::test::read_file(dump / "report.html");
    // Every chart the run's metrics feed, each with its lines: the loss with
    // its validation passes, each rank's tokens/s, memory and data loading.
    for (const char* id : {"loss", "grad_norm", "throughput", "mfu", "memory", "data_loading", "step_time"}) {
      CAPTURE(id);
      CHECK(has(figure(html, id), "<polyline"));
    }
    CHECK(has(figure(html, "loss"), "validation, step 6: "));
    for (const char* id : {"throughput", "memory", "data_loading"}) {
      CAPTURE(id);
      CHECK(has(figure(html, id), "rank 1, step 6: "));
    }
    CHECK(has(html, "<dt>ranks with metrics</dt><dd>2</dd>"));
    CHECK(has(html, "training:"));  // the resolved config

    // Chromium draws it: the screenshot is a page of charts, not a blank one.
    fs::path png = dir / "report.png";
    auto shot = titan::test::run_command("timeout 120 chromium --headless --no-sandbox --disable-gpu "
                                         "--hide-scrollbars --user-data-dir=" +
                                         (dir / "chromium-profile").string() + " --screenshot=" + png.string() +
                                         " --window-size=1200,2400 file://" + (dump / "report.html").string());
    REQUIRE_MESSAGE(fs::exists(png), shot.output);
    Image image = decode_png(titan::test::read_file(png));
    CHECK(image.width == 1200);
    CHECK(image.height == 2400);
    std::set<uint32_t> colours(image.pixels.begin(), image.pixels.end());
    size_t not_white = 0, first_line = 0, second_line = 0;
    for (uint32_t pixel : image.pixels) {
      not_white += pixel != 0xffffff;
      first_line += pixel == 0x1f77b4;  // the palette's first two colours (report/svg_chart.cpp)
      second_line += pixel == 0xd62728;
    }
    MESSAGE("screenshot " << png.string() << ": " << colours.size() << " colours, " << not_white
                          << " pixels not white, " << first_line << " of the first line colour, " << second_line
                          << " of the second");
    CHECK(colours.size() > 50);
    CHECK(not_white > image.pixels.size() / 50);
    CHECK(first_line > 500);
    CHECK(second_line > 200);
  }
}
