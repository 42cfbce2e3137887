// Line charts as SVG text; see svg_chart.h.
#include "report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace titan::report {

namespace {

const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);
constexpr int kPlotHeight = 200, kLeft = 64, kRight = 16, kBottom = 38, kTitleHeight = 24, kLegendRow = 16;
constexpr int kMostDots = 40;  // lines with more points than this get no dots

const char* colour(int index) { return kPalette[((index % kPaletteSize) + kPaletteSize) % kPaletteSize]; }

std::string px(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", value);
  return text;
}

// 1, 2, 2.5 or 5 times a power of ten, about range / target.
double round_step(double range, int target) {
  double raw = range / target;
  double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double fraction = raw / magnitude;
  double nice = fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 2.5 ? 2.5 : fraction <= 5 ? 5 : 10;
  return nice * magnitude;
}

struct Extent {
  double low = INFINITY, high = -INFINITY;
  void add(double value) {
    if (!std::isfinite(value)) return;
    low = std::min(low, value);
    high = std::max(high, value);
  }
  bool empty() const { return low > high; }
};

// Legend entries laid out in rows that fit the width; returns the rows used.
int legend(std::ostringstream& svg, const Chart& chart, int width, int top) {
  int x = kLeft, row = 0;
  auto entry = [&](const std::string& label, const char* fill, bool band) {
    int advance = 24 + int(label.size() * 6.4) + 14;
    if (x + advance > width - kRight && x > kLeft) {
      x = kLeft;
      ++row;
    }
    int y = top + row * kLegendRow;
    if (band) {
      svg << "<rect x=\"" << x << "\" y=\"" << y - 8 << "\" width=\"18\" height=\"10\" fill=\"" << fill
          << "\" fill-opacity=\"0.25\"/>";
    } else {
      svg << "<line x1=\"" << x << "\" y1=\"" << y - 3 << "\" x2=\"" << x + 18 << "\" y2=\"" << y - 3
          << "\" stroke=\"" << fill << "\" stroke-width=\"2\"/>";
    }
    svg << "<text x=\"" << x + 24 << "\" y=\"" << y << "\">" << escape_html(label) << "</text>";
    x += advance;
  };
  for (const auto& band : chart.bands) entry(band.label, colour(band.colour), true);
  for (size_t i = 0; i < chart.lines.size(); ++i) {
    const auto& line = chart.lines[i];
    entry(line.label, colour(line.colour >= 0 ? line.colour : int(i)), false);
  }
  return row + 1;
}

}  // namespace

std::string escape_html(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string format_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  const char* suffix = "";
  if (std::abs(value) >= 1e4) {
    for (const char* next : {"k", "M", "G", "T"}) {
      if (std::abs(value) < 1e3 && *suffix) break;
      value /= 1e3;
      suffix = next;
    }
  }
  char text[48];
  std::snprintf(text, sizeof(text), "%.4g%s", value == 0 ? 0.0 : value, suffix);
  std::string out = text;
  // 1e-05 -> 1e-5
  auto e = out.find("e-0");
  if (e != std::string::npos) out.erase(e + 2, 1);
  return out;
}

std::string render_svg(const Chart& chart, int width) {
  Extent xs, ys;
  for (const auto& line : chart.lines) {
    for (const auto& [step, value] : line.points) {
      if (!std::isfinite(value)) continue;
      xs.add(double(step));
      ys.add(value);
    }
  }
  for (const auto& band : chart.bands) {
    for (const auto* side : {&band.low, &band.high}) {
      for (const auto& [step, value] : *side) {
        if (!std::isfinite(value)) continue;
        xs.add(double(step));
        ys.add(value);
      }
    }
  }
  std::ostringstream svg;
  std::ostringstream legend_svg;
  const int legend_rows = legend(legend_svg, chart, width, kTitleHeight + 14);
  const int top = kTitleHeight + 14 + legend_rows * kLegendRow;
  const int height = top + kPlotHeight + kBottom;
  const int plot_width = width - kLeft - kRight;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height << "\" font-family=\"sans-serif\" font-size=\"11\">"
      << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>"
      << "<text x=\"" << kLeft << "\" y=\"18\" font-size=\"14\" font-weight=\"bold\">" << escape_html(chart.title)
      << "</text>" << legend_svg.str();
  if (xs.empty()) {
    svg << "<text x=\"" << kLeft + 10 << "\" y=\"" << top + kPlotHeight / 2 << "\" fill=\"#888\">no finite values</text>"
        << "</svg>";
    return svg.str();
  }
  // The axes' ranges: y widened to whole ticks, x the steps logged.
  // A little room above and below, so a line is not hidden in the frame;
  // not below 0 for values that never are (a count, a loss).
  const double pad = ys.low == ys.high ? (ys.low == 0 ? 1 : std::abs(ys.low) * 0.05) : (ys.high - ys.low) * 0.04;
  const bool non_negative = ys.low >= 0;
  ys.low -= pad;
  ys.high += pad;
  if (non_negative) ys.low = std::max(ys.low, 0.0);
  const double y_step = round_step(ys.high - ys.low, 5);
  ys.low = std::floor(ys.low / y_step) * y_step;
  ys.high = std::ceil(ys.high / y_step) * y_step;
  if (xs.low == xs.high) {
    xs.low -= 1;
    xs.high += 1;
  }
  const double x_step = std::max(1.0, std::round(round_step(xs.high - xs.low, 6)));
  auto to_x = [&](double step) { return kLeft + (step - xs.low) / (xs.high - xs.low) * plot_width; };
  auto to_y = [&](double value) { return top + (ys.high - value) / (ys.high - ys.low) * kPlotHeight; };

  svg << "<g stroke=\"#e5e5e5\">";
  for (double y = ys.low; y <= ys.high + y_step * 0.5; y += y_step) {
    svg << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + plot_width << "\" y1=\"" << px(to_y(y)) << "\" y2=\""
        << px(to_y(y)) << "\"/>";
  }
  svg << "</g><g text-anchor=\"end\" fill=\"#444\">";
  for (double y = ys.low; y <= ys.high + y_step * 0.5; y += y_step) {
    double shown = std::abs(y) < y_step * 1e-9 ? 0 : y;
    svg << "<text x=\"" << kLeft - 6 << "\" y=\"" << px(to_y(y) + 4) << "\">" << format_number(shown) << "</text>";
  }
  svg << "</g><g text-anchor=\"middle\" fill=\"#444\">";
  for (double x = std::ceil(xs.low / x_step) * x_step; x <= xs.high; x += x_step) {
    svg << "<line x1=\"" << px(to_x(x)) << "\" x2=\"" << px(to_x(x)) << "\" y1=\"" << top + kPlotHeight
        << "\" y2=\"" << top + kPlotHeight + 4 << "\" stroke=\"#888\"/><text x=\"" << px(to_x(x)) << "\" y=\""
        << top + kPlotHeight + 16 << "\">" << format_number(x) << "</text>";
  }
  svg << "<text x=\"" << kLeft + plot_width / 2 << "\" y=\"" << top + kPlotHeight + 32 << "\">step</text></g>";
  if (!chart.unit.empty()) {
    svg << "<text transform=\"translate(12," << top + kPlotHeight / 2 << ") rotate(-90)\" text-anchor=\"middle\" "
        << "fill=\"#444\">" << escape_html(chart.unit) << "</text>";
  }
  svg << "<rect x=\"" << kLeft << "\" y=\"" << top << "\" width=\"" << plot_width << "\" height=\"" << kPlotHeight
      << "\" fill=\"none\" stroke=\"#888\"/>";

  for (const auto& band : chart.bands) {
    std::string upper, lower;
    for (const auto& [step, high] : band.high) {
      auto low = band.low.find(step);
      if (low == band.low.end() || !std::isfinite(high) || !std::isfinite(low->second)) continue;
      upper += px(to_x(double(step))) + "," + px(to_y(high)) + " ";
      lower = px(to_x(double(step))) + "," + px(to_y(low->second)) + " " + lower;
    }
    if (upper.empty()) continue;
    svg << "<polygon class=\"band\" points=\"" << upper << lower << "\" fill=\"" << colour(band.colour)
        << "\" fill-opacity=\"0.25\" stroke=\"none\"/>";
  }
  for (size_t i = 0; i < chart.lines.size(); ++i) {
    const auto& line = chart.lines[i];
    const char* stroke = colour(line.colour >= 0 ? line.colour : int(i));
    // One polyline per run of finite values, so a NaN leaves a gap.
    std::string points;
    size_t finite = 0;
    auto flush = [&] {
      if (!points.empty()) {
        svg << "<polyline class=\"line\" points=\"" << points << "\" fill=\"none\" stroke=\"" << stroke
            << "\" stroke-width=\"2\" stroke-linejoin=\"round\"/>";
      }
      points.clear();
    };
    for (const auto& [step, value] : line.points) {
      if (!std::isfinite(value)) {
        flush();
        continue;
      }
      ++finite;
      points += px(to_x(double(step))) + "," + px(to_y(value)) + " ";
    }
    flush();
    if (finite > size_t(kMostDots)) continue;
    for (const auto& [step, value] : line.points) {
      if (!std::isfinite(value)) continue;
      svg << "<circle cx=\"" << px(to_x(double(step))) << "\" cy=\"" << px(to_y(value)) << "\" r=\"3\" fill=\""
          << stroke << "\"><title>" << escape_html(line.label) << ", step " << step << ": " << format_number(value)
          << "</title></circle>";
    }
  }
  svg << "</svg>";
  return svg.str();
}

}  // namespace titan::report
