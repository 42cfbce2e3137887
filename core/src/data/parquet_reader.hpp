// A Parquet file's string column, read value by value through Apache
// Arrow's C++ library (PyPI's pyarrow wheel carries it; scripts/setup.sh
// installs it). Arrow's headers need C++20 and core is C++17, so no Arrow
// type appears here: the reader is its own target (core/parquet/).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace titan::data {

class ParquetTextReader {
 public:
  // Throws titan::Error naming the file: not Parquet or damaged, no column
  // `column`, or a column that is not strings.
  ParquetTextReader(const std::string& path, const std::string& column);
  ~ParquetTextReader();
  ParquetTextReader(const ParquetTextReader&) = delete;
  ParquetTextReader& operator=(const ParquetTextReader&) = delete;
  // The next non-null value; false at the end. A damaged row group throws,
  // naming the file and the row group.
  bool next(std::string& text);
  void rewind();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Whether this build reads Parquet (pyarrow was found when it was built).
bool parquet_supported();

}  // namespace titan::data
