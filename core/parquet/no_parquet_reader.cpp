// ParquetTextReader in a build without Arrow (no pyarrow next to torch when
// it was configured): every Parquet dataset is refused, saying how to get one.
#include "data/parquet_reader.hpp"
#include "titan/error.hpp"

namespace titan::data {

struct ParquetTextReader::Impl {};

ParquetTextReader::ParquetTextReader(const std::string& path, const std::string& /*column*/) {
  throw Error("Parquet dataset '" + path + "': this build of Titan reads no Parquet (pyarrow, whose Arrow C++ "
              "library it uses, was not installed when it was built); run scripts/setup.sh, then rebuild");
}
ParquetTextReader::~ParquetTextReader() = default;
bool ParquetTextReader::next(std::string&) { return false; }
void ParquetTextReader::rewind() {}

bool parquet_supported() { return false; }

}  // namespace titan::data
