// Dataset sources as people keep them: Parquet written by pyarrow and
// zstd-compressed JSONL against their plain JSONL twin, damaged files
// refused by name, folders and globs of shards, weighted mixtures, and the
// loader's cursor, which resumes on another data-parallel degree without
// reading what came before it.
#include "doctest_torch.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <fstream>

#include "data/parquet_reader.hpp"
#include "error_of.hpp"
#include "test_support.hpp"
#include "titan/data.hpp"
#include "titan/error.hpp"
#include "titan/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;

// 60 documents of uneven length, some beyond ASCII, as {"text": ...} lines.
std::string sources_test_documents() {
  const char* words[] = {"river", "stone", "ünïcode", "light", "がっこう", "wind", "and", "the", "far", "ember"};
  std::string lines;
  uint32_t state = 5;
  for (int document = 0; document < 60; ++document) {
    std::string text = "doc " + std::to_string(document) + ":";
    state = state * 1664525u + 1013904223u;
    for (int i = 0, length = 1 + static_cast<int>(state >> 27); i < length; ++i) {
      state = state * 1664525u + 1013904223u;
      text += std::string(" ") + words[(state >> 24) % 10];
    }
    lines += nlohmann::json{{"text", text}}.dump() + "\n";
  }
  return lines;
}

// The documents in DIR/docs.jsonl, and pyarrow's Parquet and zstd twins
// (tests/python/dataset_files.py); false when .venv has no pyarrow.
bool write_twins(const fs::path& dir) {
  titan::test::write_file(dir / "docs.jsonl", sources_test_documents());
  const std::string python = titan::test::source_dir() + "/.venv/bin/python";
  if (titan::test::run_command(python + " -c 'import pyarrow'").exit_code != 0) return false;
  auto result = titan::test::run_command("timeout 60 " + python + " " + titan::test::source_dir() +
                                         "/tests/python/dataset_files.py " + (dir / "docs.jsonl").string() + " " +
                                         dir.string());
  REQUIRE_MESSAGE(result.exit_code == 0, result.output);
  return true;
}

std::vector<std::string> texts_of(titan::DocumentSource& source) {
  std::vector<std::string> texts;
  while (auto text = source.next_text()) texts.push_back(*text);
  return texts;
}

titan::SourceOptions column(const std::string& field) {
  titan::SourceOptions options;
  options.text_field = field;
  return options;
}

}  // namespace

TEST_CASE("sources: Parquet written by pyarrow and zstd JSONL give the token stream of their plain JSONL twin") {
  const fs::path dir = titan::test::temp_dir("sources_twins");
  if (!write_twins(dir)) {
    MESSAGE("TITAN_SKIPPED: no pyarrow in .venv (scripts/setup.sh installs it)");
    return;
  }
  REQUIRE(titan::data::parquet_supported());
  auto plain = titan::open_dataset((dir / "docs.jsonl").string());
  const std::vector<std::string> expected = texts_of(*plain);
  REQUIRE(expected.size() == 60);
  for (const char* twin : {"docs.parquet", "docs.jsonl.zst"}) {
    CAPTURE(twin);
    auto source = titan::open_dataset((dir / twin).string());
    CHECK(texts_of(*source) == expected);  // the parquet's null rows skipped
    source->rewind();
    CHECK(texts_of(*source) == expected);  // a second epoch
    // The windows a run trains on, tokenized by the bytes tokenizer.
    std::shared_ptr<const titan::Tokenizer> bytes = titan::load_tokenizer("bytes");
    titan::TokenWindowLoader ours(titan::open_dataset((dir / twin).string()), bytes, 32);
    titan::TokenWindowLoader reference(titan::open_dataset((dir / "docs.jsonl").string()), bytes, 32);
    for (int batch = 0; batch < 12; ++batch) CHECK(at::equal(ours.next_batch(8), reference.next_batch(8)));
  }
  auto large = titan::open_dataset((dir / "large.parquet").string(), column("body"));
  CHECK(texts_of(*large) == expected);
}

TEST_CASE("sources: damaged or mismatched files are refused naming the file and what to do") {
  const fs::path dir = titan::test::temp_dir("sources_damaged");
  if (!write_twins(dir)) {
    MESSAGE("TITAN_SKIPPED: no pyarrow in .venv (scripts/setup.sh installs it)");
    return;
  }
  using titan::test::has;
  const std::string missing = titan::test::error_of([&] { titan::open_dataset((dir / "docs.parquet").string(), column("body")); });
  CHECK(has(missing, "docs.parquet' has no column 'body' (its columns: id, text); set text_field"));
  const std::string ints = titan::test::error_of([&] { titan::open_dataset((dir / "docs.parquet").string(), column("id")); });
  CHECK(has(ints, "column 'id' that holds INT64, not strings"));
  const std::string cut = titan::test::error_of([&] { titan::open_dataset((dir / "truncated.parquet").string()); });
  CHECK(has(cut, "truncated.parquet' is not a readable Parquet file"));
  const std::string damaged = titan::test::error_of([&] { texts_of(*titan::open_dataset((dir / "damaged.parquet").string())); });
  CHECK(has(damaged, "damaged.parquet' is damaged in row group 0 of 10"));
  const std::string cut_zst = titan::test::error_of([&] { texts_of(*titan::open_dataset((dir / "truncated.jsonl.zst").string())); });
  CHECK(has(cut_zst, "truncated.jsonl.zst' "));
  CHECK(has(cut_zst, "truncated"));
  titan::test::write_file(dir / "noise.jsonl.zst", "this is not zstd at all\n");
  CHECK(has(titan::test::error_of([&] { titan::open_dataset((dir / "noise.jsonl.zst").string()); }),
            "noise.jsonl.zst' near line 1: zstd read error"));
  titan::test::write_file(dir / "mixed/a.jsonl", "{\"text\": \"a\"}\n");
  titan::test::write_file(dir / "mixed/b.txt", "b\n");
  CHECK(has(titan::test::error_of([&] { titan::open_dataset((dir / "mixed").string()); }), "mixes formats"));
  CHECK(has(titan::test::error_of([&] { titan::open_dataset((dir / "none-*.parquet").string()); }), "matches no files"));
}

TEST_CASE("sources: a folder or a glob of shards reads them in name order, each epoch from the first") {
  const fs::path dir = titan::test::temp_dir("sources_shards");
  std::vector<std::string> expected;
  for (int shard = 2; shard >= 0; --shard) {  // written out of order
    std::string lines;
    for (int i = 0; i < 3; ++i) lines += "{\"text\": \"shard " + std::to_string(shard) + " doc " + std::to_string(i) + "\"}\n";
    titan::test::write_file(dir / ("part-" + std::to_string(shard) + ".jsonl"), lines);
  }
  for (int shard = 0; shard < 3; ++shard) {
    for (int i = 0; i < 3; ++i) expected.push_back("shard " + std::to_string(shard) + " doc " + std::to_string(i));
  }
  titan::test::write_file(dir / "README", "not a shard");
  for (const fs::path& name : {dir, dir / "part-*.jsonl"}) {
    CAPTURE(name);
    auto source = titan::open_dataset(name.string());
    CHECK(texts_of(*source) == expected);
    source->rewind();
    CHECK(texts_of(*source) == expected);
  }
  // The cursor names the shard and the document in it; seeking reopens
  // that shard only.
  auto source = titan::open_dataset(dir.string());
  for (int i = 0; i < 5; ++i) source->next_text();
  const nlohmann::json cursor = source->cursor();
  CHECK(cursor["shard"] == 1);
  CHECK(cursor["in_shard"]["documents"] == 2);
  auto resumed = titan::open_dataset(dir.string());
  resumed->seek(cursor);
  CHECK(*resumed->next_text() == "shard 1 doc 2");
  fs::rename(dir / "part-1.jsonl", dir / "part-1b.jsonl");
  auto changed = titan::open_dataset(dir.string());
  CHECK(titan::test::has(titan::test::error_of([&] { changed->seek(cursor); }), "the shards changed since the save"));
}

TEST_CASE("sources: a weighted mixture draws by weight, the same on every open, and ends its epoch after every "
          "source") {
  const fs::path dir = titan::test::temp_dir("sources_mixture");
  std::string big, small;
  for (int i = 0; i < 3000; ++i) big += "{\"text\": \"B" + std::to_string(i) + "\"}\n";
  for (int i = 0; i < 400; ++i) small += "{\"text\": \"S" + std::to_string(i) + "\"}\n";
  titan::test::write_file(dir / "big.jsonl", big);
  titan::test::write_file(dir / "small.jsonl", small);
  std::shared_ptr<const titan::Tokenizer> bytes = titan::load_tokenizer("bytes");
  const std::vector<titan::DatasetEntry> entries = {{(dir / "big.jsonl").string(), 3.0},
                                                    {(dir / "small.jsonl").string(), 1.0}};
  auto first_letters = [&](uint64_t seed, size_t count) {
    auto mixture = titan::open_mixture(entries, seed, bytes);
    std::string letters;
    while (letters.size() < count) {
      auto ids = mixture->next_tokens();
      if (!ids) break;
      REQUIRE(ids->front() == bytes->bos_id());
      REQUIRE(ids->back() == bytes->eos_id());
      letters.push_back(static_cast<char>((*ids)[1]));
    }
    return letters;
  };
  const std::string drawn = first_letters(7, 2000);
  REQUIRE(drawn.size() == 2000);
  const double big_share = static_cast<double>(std::count(drawn.begin(), drawn.end(), 'B')) / drawn.size();
  MESSAGE("share of the source of weight 3 in 2000 draws: " << big_share);
  CHECK(std::abs(big_share - 0.75) < 0.03);  // 3 standard deviations
  CHECK(first_letters(7, 2000) == drawn);
  CHECK(first_letters(8, 2000) != drawn);
  // The small source (400 at 1/4) restarts after about 1,600 draws; the
  // epoch ends when the big one (3,000 at 3/4) is through, about 4,000.
  const size_t epoch = first_letters(7, 100000).size();
  MESSAGE("draws in the mixture's epoch: " << epoch);
  CHECK(epoch > 3800);
  CHECK(epoch < 4200);
  CHECK(titan::test::has(titan::test::error_of([&] {
                           titan::open_mixture({{(dir / "big.jsonl").string(), 0.0}, entries[1]}, 7, bytes);
                         }),
                         "weight must be a positive number"));
  std::ofstream(dir / "ids.u16", std::ios::binary).write("\x01\x00\x02\x00", 4);
  CHECK(titan::test::has(
      titan::test::error_of([&] { titan::open_mixture({{(dir / "ids.u16").string(), 1.0}, entries[1]}, 7, bytes); }),
      "pre-tokenized shards come in chunks"));
}

TEST_CASE("sources: the loader's cursor resumes a packed mixture on another data-parallel degree, reading no "
          "shard before it") {
  const fs::path dir = titan::test::temp_dir("sources_cursor");
  for (int shard = 0; shard < 4; ++shard) {
    std::string lines;
    for (int i = 0; i < 10; ++i) {
      lines += "{\"text\": \"shard " + std::to_string(shard) + " story " + std::to_string(i) + std::string(i % 7, '!') +
               "\"}\n";
    }
    titan::test::write_file(dir / ("shards/part-" + std::to_string(shard) + ".jsonl"), lines);
  }
  std::string other;
  for (int i = 0; i < 30; ++i) other += "{\"text\": \"other " + std::to_string(i) + "\"}\n";
  titan::test::write_file(dir / "other.jsonl", other);
  std::shared_ptr<const titan::Tokenizer> bytes = titan::load_tokenizer("bytes");
  const std::vector<titan::DatasetEntry> entries = {{(dir / "shards").string(), 2.0},
                                                    {(dir / "other.jsonl").string(), 1.0}};
  auto loader_at = [&](int rank, int degree) {
    auto loader = std::make_unique<titan::TokenWindowLoader>(titan::open_mixture(entries, 3, bytes), bytes, 24, rank,
                                                             degree);
    loader->set_packing(titan::Packing::first_fit);
    return loader;
  };
  // One rank: 6 batches of 4, the cursor, then 3 more batches.
  auto straight = loader_at(0, 1);
  for (int i = 0; i < 6; ++i) straight->next_batch(4);
  const nlohmann::json cursor = straight->cursor();
  CHECK(cursor["windows"] == 24);
  CHECK(cursor["source"]["sources"][0]["shard"].get<int>() >= 1);
  std::vector<at::Tensor> after;
  for (int i = 0; i < 3; ++i) after.push_back(straight->next_batch(4));
  // Shard 0 is damaged after its first line: a resume that replayed the
  // stream would fail there.
  titan::test::write_file(dir / "shards/part-0.jsonl", "{\"text\": \"shard 0 story 0\"}\nnot json\n");
  for (int rank = 0; rank < 2; ++rank) {
    CAPTURE(rank);
    auto resumed = loader_at(rank, 2);
    resumed->seek(cursor);
    for (int i = 0; i < 3; ++i) CHECK(at::equal(resumed->next_batch(2), after[i].narrow(0, 2 * rank, 2)));
  }
  auto other_length = std::make_unique<titan::TokenWindowLoader>(titan::open_mixture(entries, 3, bytes), bytes, 16);
  CHECK(titan::test::has(titan::test::error_of([&] { other_length->seek(cursor); }), "saved with seq_len 24"));
}

TEST_CASE("sources: the cursor inside a token shard's chunk names the chunk and the offset, not the tokens") {
  const fs::path dir = titan::test::temp_dir("sources_token_cursor");
  std::string ids;
  for (int i = 0; i < 5000; ++i) {
    const uint16_t id = static_cast<uint16_t>(i % 200 == 199 ? 257 : i % 251);  // EOS every 200 ids
    ids.append(reinterpret_cast<const char*>(&id), 2);
  }
  std::ofstream(dir / "ids.u16", std::ios::binary) << ids;
  std::shared_ptr<const titan::Tokenizer> bytes = titan::load_tokenizer("bytes");
  titan::TokenWindowLoader straight(titan::open_dataset((dir / "ids.u16").string()), bytes, 16);
  for (int i = 0; i < 10; ++i) straight.next_batch(4);
  const nlohmann::json cursor = straight.cursor();
  CHECK(cursor["consumed_of_document"] == 10 * 4 * 17);
  CHECK(cursor.dump().size() < 400);
  titan::TokenWindowLoader resumed(titan::open_dataset((dir / "ids.u16").string()), bytes, 16);
  resumed.seek(cursor);
  for (int i = 0; i < 100; ++i) CHECK(at::equal(resumed.next_batch(4), straight.next_batch(4)));  // two epochs on
}
