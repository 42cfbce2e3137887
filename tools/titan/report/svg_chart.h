// A line chart over training steps as inline SVG, drawn without JavaScript:
// round ticks, one polyline per line (broken where a value is NaN), dots
// where a line has few points, shaded min-max bands, a legend. Changes with
// the look of the charts.
#pragma once
#include <string>
#include <vector>

#include "report/run_folder.h"

namespace titan::report {

struct ChartLine {
  std::string label;
  Series points;
  int colour = -1;  // index into the palette; -1: the line's own index
};

// A shaded range under the lines, e.g. a metric's spread over the ranks.
struct ChartBand {
  std::string label;
  Series low, high;  // drawn where both have the step
  int colour = 0;
};

struct Chart {
  std::string id;  // the figure's HTML id
  std::string title;
  std::string unit;  // the y axis' label
  std::vector<ChartBand> bands;
  std::vector<ChartLine> lines;
};

// The chart as one <svg> element `width` pixels wide (its height follows
// from the legend).
std::string render_svg(const Chart& chart, int width);

// Text made safe inside HTML and SVG elements and attribute values.
std::string escape_html(const std::string& text);
// A number short enough for an axis or a summary: 4 significant digits,
// with k, M, G, T from 10,000 on.
std::string format_number(double value);

}  // namespace titan::report
