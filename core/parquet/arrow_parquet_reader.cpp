// ParquetTextReader through Arrow's Parquet reader: one row group's column
// in memory at a time. Compiled as C++20 (Arrow's headers need it), outside
// core's unity batches and precompiled header.
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>

#include "data/parquet_reader.hpp"
#include "titan/error.hpp"

namespace titan::data {

struct ParquetTextReader::Impl {
  std::string path, column;
  std::unique_ptr<parquet::arrow::FileReader> reader;
  int leaf = -1;  // the column's index among the file's leaf columns
  int row_groups = 0;
  int next_row_group = 0;
  std::shared_ptr<arrow::ChunkedArray> values;  // of the row group being read
  int chunk = 0;
  int64_t index = 0;  // in the chunk

  Error error(const std::string& what) const {
    return Error("Parquet dataset '" + path + "' " + what);
  }

  // The next row group's column; false after the last.
  bool load_row_group() {
    if (next_row_group == row_groups) return false;
    arrow::Result<std::shared_ptr<arrow::Table>> table = reader->ReadRowGroup(next_row_group, {leaf});
    if (!table.ok()) {
      throw error("has a damaged row group (" + std::to_string(next_row_group) + " of " + std::to_string(row_groups) +
                  "): " + table.status().ToString() + "; rewrite or remove the file");
    }
    values = (*table)->column(0);
    chunk = 0;
    index = 0;
    ++next_row_group;
    return true;
  }
};

ParquetTextReader::ParquetTextReader(const std::string& path, const std::string& column)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.path = path;
  s.column = column;
  arrow::Result<std::shared_ptr<arrow::io::ReadableFile>> file = arrow::io::ReadableFile::Open(path);
  if (!file.ok()) throw s.error("cannot be opened: " + file.status().ToString());
  arrow::Result<std::unique_ptr<parquet::arrow::FileReader>> opened =
      parquet::arrow::OpenFile(*file, arrow::default_memory_pool());
  if (!opened.ok()) throw s.error("is not a readable Parquet file: " + opened.status().ToString());
  s.reader = std::move(*opened);
  std::shared_ptr<arrow::Schema> schema;
  arrow::Status read = s.reader->GetSchema(&schema);
  if (!read.ok()) throw s.error("has a schema that cannot be read: " + read.ToString());
  const int field = schema->GetFieldIndex(column);
  if (field < 0) {
    std::string columns;
    for (const auto& f : schema->fields()) columns += (columns.empty() ? "" : ", ") + f->name();
    throw s.error("has no column '" + column + "' (its columns: " + columns +
                  "); set text_field to the column that holds the text");
  }
  const arrow::DataType& type = *schema->field(field)->type();
  if (type.id() != arrow::Type::STRING && type.id() != arrow::Type::LARGE_STRING) {
    throw s.error("has a column '" + column + "' that holds " + type.ToString() + ", not strings; set text_field to the column "
                  "that holds the text");
  }
  s.leaf = s.reader->parquet_reader()->metadata()->schema()->ColumnIndex(column);
  if (s.leaf < 0) throw s.error("has a nested column '" + column + "'; the text must be a top-level string column");
  s.row_groups = s.reader->num_row_groups();
}

ParquetTextReader::~ParquetTextReader() = default;

bool ParquetTextReader::next(std::string& text) {
  Impl& s = *impl_;
  for (;;) {
    if (!s.values || s.chunk == s.values->num_chunks()) {
      if (!s.load_row_group()) return false;
      continue;
    }
    const arrow::Array& chunk = *s.values->chunk(s.chunk);
    if (s.index == chunk.length()) {
      ++s.chunk;
      s.index = 0;
      continue;
    }
    const int64_t i = s.index++;
    if (chunk.IsNull(i)) continue;
    const std::string_view value = chunk.type_id() == arrow::Type::STRING
                                       ? static_cast<const arrow::StringArray&>(chunk).GetView(i)
                                       : static_cast<const arrow::LargeStringArray&>(chunk).GetView(i);
    text.assign(value.data(), value.size());
    return true;
  }
}

void ParquetTextReader::rewind() {
  impl_->next_row_group = 0;
  impl_->values.reset();
}

bool parquet_supported() { return true; }

}  // namespace titan::data
