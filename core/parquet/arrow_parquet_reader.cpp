// ParquetTextReader through Arrow's low-level Parquet column reader: the
// text column streamed in batches of values, so memory stays bounded
// whatever a row group holds or a damaged footer claims (a fuzzed file
// claiming 28 billion rows made the whole-row-group Arrow API allocate
// gigabytes). Compiled as C++20 (Arrow's headers need it), outside core's
// unity batches and precompiled header.
#include <parquet/column_reader.h>
#include <parquet/exception.h>
#include <parquet/file_reader.h>
#include <parquet/metadata.h>
#include <parquet/schema.h>

#include "data/parquet_reader.hpp"
#include "titan/error.hpp"

namespace titan::data {

namespace {
constexpr int64_t kBatchValues = 1024;
}

struct ParquetTextReader::Impl {
  std::string path, column;
  std::unique_ptr<parquet::ParquetFileReader> file;
  int leaf = -1;  // the column's index among the file's leaf columns
  int16_t max_definition = 0;  // a value below it is a null (0: a required column)
  int row_groups = 0;
  int next_row_group = 0;
  std::shared_ptr<parquet::ColumnReader> reader;  // of the row group being read
  std::vector<int16_t> definitions = std::vector<int16_t>(kBatchValues);
  std::vector<parquet::ByteArray> values = std::vector<parquet::ByteArray>(kBatchValues);
  int64_t levels = 0, level = 0, value = 0;  // the batch read, and where in it

  Error error(const std::string& what) const { return Error("Parquet dataset '" + path + "' " + what); }

  // The next batch of the column's levels and values; false after the last.
  bool read_batch() {
    while (!reader || !reader->HasNext()) {
      if (next_row_group == row_groups) return false;
      reader = file->RowGroup(next_row_group++)->Column(leaf);
    }
    int64_t values_read = 0;
    levels = static_cast<parquet::ByteArrayReader&>(*reader).ReadBatch(
        kBatchValues, max_definition > 0 ? definitions.data() : nullptr, nullptr, values.data(), &values_read);
    level = value = 0;
    return true;
  }

  bool next(std::string& text) {
    for (;;) {
      if (level == levels) {
        if (!read_batch()) return false;
        continue;
      }
      const bool null = max_definition > 0 && definitions[static_cast<size_t>(level)] < max_definition;
      ++level;
      if (null) continue;
      const parquet::ByteArray& bytes = values[static_cast<size_t>(value++)];
      text.assign(reinterpret_cast<const char*>(bytes.ptr), bytes.len);
      return true;
    }
  }
};

ParquetTextReader::ParquetTextReader(const std::string& path, const std::string& column)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.path = path;
  s.column = column;
  try {
    s.file = parquet::ParquetFileReader::OpenFile(path, /*memory_map=*/false);
  } catch (const parquet::ParquetException& e) {
    throw s.error("is not a readable Parquet file: " + std::string(e.what()));
  }
  const std::shared_ptr<parquet::FileMetaData> metadata = s.file->metadata();
  const parquet::SchemaDescriptor& schema = *metadata->schema();
  s.leaf = schema.ColumnIndex(column);
  if (s.leaf < 0) {
    std::string columns;
    for (int i = 0; i < schema.num_columns(); ++i) columns += (i ? ", " : "") + schema.Column(i)->path()->ToDotString();
    throw s.error("has no column '" + column + "' (its columns: " + columns +
                  "); set text_field to the column that holds the text");
  }
  const parquet::ColumnDescriptor& descriptor = *schema.Column(s.leaf);
  const bool strings = descriptor.physical_type() == parquet::Type::BYTE_ARRAY &&
                       (descriptor.logical_type()->is_string() ||
                        descriptor.converted_type() == parquet::ConvertedType::UTF8);
  if (!strings) {
    const std::string type = descriptor.logical_type()->is_none() ? parquet::TypeToString(descriptor.physical_type())
                                                                  : descriptor.logical_type()->ToString();
    throw s.error("has a column '" + column + "' that holds " + type +
                  ", not strings; set text_field to the column that holds the text");
  }
  if (descriptor.max_repetition_level() > 0) {
    throw s.error("has a repeated column '" + column + "'; the text must be one string a row");
  }
  s.max_definition = descriptor.max_definition_level();
  s.row_groups = metadata->num_row_groups();
}

ParquetTextReader::~ParquetTextReader() = default;

bool ParquetTextReader::next(std::string& text) {
  Impl& s = *impl_;
  try {
    return s.next(text);
  } catch (const parquet::ParquetException& e) {
    throw s.error("is damaged in row group " + std::to_string(s.next_row_group - 1) + " of " +
                  std::to_string(s.row_groups) + ": " + e.what() + "; rewrite or remove the file");
  }
}

void ParquetTextReader::rewind() {
  Impl& s = *impl_;
  s.next_row_group = 0;
  s.reader.reset();
  s.levels = s.level = s.value = 0;
}

bool parquet_supported() { return true; }

}  // namespace titan::data
