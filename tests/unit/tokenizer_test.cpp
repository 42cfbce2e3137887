// Tokenizer tests: the tiktoken, tokenizer.json and bytes kinds on hand-made
// files (exact ids by the formats' merge rules, round trips on any bytes),
// their errors, and the BPE trainer (tie rule, determinism, reload).
#include "doctest_torch.hpp"
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "titan/data.hpp"
#include "titan/error.hpp"
#include "titan/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    const char* base = std::getenv("TITAN_TEST_TMP");  // set by CTest
    path_ = (base != nullptr && *base != '\0' ? fs::path(base) : fs::temp_directory_path()) /
            ("titan-tokenizer-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string base64(const std::string& bytes) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    uint32_t v = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8) | uint8_t(bytes[i + 2]);
    for (int k = 3; k >= 0; --k) out.push_back(alphabet[(v >> (6 * k)) & 63]);
  }
  if (bytes.size() - i == 1) {
    uint32_t v = uint32_t(uint8_t(bytes[i])) << 16;
    out += {alphabet[(v >> 18) & 63], alphabet[(v >> 12) & 63], '=', '='};
  } else if (bytes.size() - i == 2) {
    uint32_t v = (uint32_t(uint8_t(bytes[i])) << 16) | (uint32_t(uint8_t(bytes[i + 1])) << 8);
    out += {alphabet[(v >> 18) & 63], alphabet[(v >> 12) & 63], alphabet[(v >> 6) & 63], '='};
  }
  return out;
}

// GPT-2's byte -> printable character table, written out from its definition.
std::string byte_char(int b) {
  int extra = 0, cp = -1;
  for (int x = 0; x < 256; ++x) {
    bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
    int mapped = printable ? x : 256 + extra++;
    if (x == b) cp = mapped;
  }
  std::string out;
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
  return out;
}

// Ranks 0..255 are the bytes; then a few merges. "o w" crosses a word
// boundary, so pre-tokenization must keep it from ever being used.
const std::vector<std::string> kTiktokenExtra = {"he", "ll",   "hell",   "hello", " w",
                                                 "or", " wor", " world", "o w",   "lo"};

std::string tiktoken_file_text() {
  std::string text;
  for (int b = 0; b < 256; ++b) text += base64(std::string(1, char(b))) + " " + std::to_string(b) + "\n";
  for (size_t i = 0; i < kTiktokenExtra.size(); ++i) {
    text += base64(kTiktokenExtra[i]) + " " + std::to_string(256 + i) + "\n";
  }
  return text;
}

// Ids 0..255 are the bytes (id = byte value); merges in priority order.
std::string tokenizer_json_text() {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    std::string s = byte_char(b);
    std::string escaped;
    for (char c : s) {
      if (c == '"' || c == '\\') escaped.push_back('\\');
      escaped.push_back(c);
    }
    vocab += "\"" + escaped + "\": " + std::to_string(b) + ",\n";
  }
  const std::string G = byte_char(' ');  // "Ġ"
  vocab += "\"he\": 256, \"ll\": 257, \"hell\": 258, \"hello\": 259, \"" + G + "w\": 260, \"or\": 261, \"" + G +
           "wor\": 262, \"ld\": 263, \"" + G + "world\": 264";
  std::string merges = "\"h e\", [\"l\", \"l\"], \"he ll\", [\"hell\", \"o\"], \"" + G + " w\", \"o r\", [\"" + G +
                       "w\", \"or\"], \"l d\", \"" + G + "wor ld\"";
  return R"({"version": "1.0", "added_tokens": [
      {"id": 265, "content": "<|begin_of_text|>", "special": true},
      {"id": 266, "content": "<|end_of_text|>", "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {)" +
         vocab + "}, \"merges\": [" + merges + "]}}";
}

std::vector<std::string> round_trip_samples() {
  std::string random_bytes;
  uint64_t x = 12345;
  for (int i = 0; i < 5000; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    random_bytes.push_back(char(x >> 56));
  }
  return {"",
          "a",
          "Hello, world! It's 2024; we're testing 1234567 tokens.",
          "hello world hellohello o w",
          "日本語のテキストと中文字符",
          "emoji: 🎉🚀👩‍👩‍👧 and Ünïcödé ñ",
          std::string("invalid \xff\xfe bytes \xc3\x28 and a lone \x80 continuation\xe2\x82"),
          "   multiple   spaces\n\n\ttabs\r\n and lines  \n",
          std::string(3000, ' ') + "x" + std::string(2000, '!'),
          std::string("nul \0 inside", 12),
          random_bytes};
}

void check_round_trips(const titan::Tokenizer& tok) {
  for (const std::string& text : round_trip_samples()) {
    Ids ids = tok.encode(text);
    for (int32_t id : ids) {
      REQUIRE(id >= 0);
      REQUIRE(id < tok.vocab_size());
    }
    CHECK_MESSAGE(tok.decode(ids) == text, "round trip of a " << text.size() << "-byte sample");
  }
  CHECK(tok.encode("").empty());
}

std::vector<std::string> story_corpus(int count) {
  std::vector<std::string> docs;
  for (int i = 0; i < count; ++i) docs.push_back(titan::generate_story(7, i));
  return docs;
}

}  // namespace

TEST_CASE("tokenizer: tiktoken file merges by rank inside pre-tokenized pieces") {
  TempDir dir;
  write_file(dir.file("tokenizer.model"), tiktoken_file_text());
  auto tok = titan::load_tokenizer(dir.file("tokenizer.model"));
  CHECK(tok->vocab_size() == 266 + 256);
  CHECK(tok->bos_id() == 266);
  CHECK(tok->eos_id() == 267);
  CHECK(tok->encode("hello world") == Ids{259, 263});
  CHECK(tok->encode("hellohello") == Ids{259, 259});
  CHECK(tok->encode("world") == Ids{'w', 261, 'l', 'd'});
  CHECK(tok->encode("o w") == Ids{'o', 260});  // "o w" is a token but crosses a piece boundary
  CHECK(tok->encode("Hello") == Ids{'H', 'e', 257, 'o'});
  CHECK(tok->decode({266, 259, 267}) == "<|begin_of_text|>hello<|end_of_text|>");
  CHECK(tok->decode({266 + 9}) == "<|eot_id|>");
  CHECK_THROWS_AS(tok->decode({266 + 256}), titan::Error);
  check_round_trips(*tok);
  // A folder holding tokenizer.model is accepted too.
  CHECK(titan::load_tokenizer(dir.file(""))->encode("hello") == Ids{259});
}

TEST_CASE("tokenizer: Llama 3 pre-tokenization splits contractions, digits by three, and spaces") {
  // With only byte tokens plus a few multi-byte ones, the ids show the pieces.
  TempDir dir;
  std::string text;
  for (int b = 0; b < 256; ++b) text += base64(std::string(1, char(b))) + " " + std::to_string(b) + "\n";
  const std::vector<std::string> extra = {"12", "123", "'s", "'S", "  ", " x", "yz", "4 5", "aa"};
  for (size_t i = 0; i < extra.size(); ++i) text += base64(extra[i]) + " " + std::to_string(256 + i) + "\n";
  write_file(dir.file("t.model"), text);
  auto tok = titan::load_tokenizer(dir.file("t.model"));
  CHECK(tok->encode("1234") == Ids{257, '4'});        // \p{N}{1,3}
  CHECK(tok->encode("it's") == Ids{'i', 't', 258});   // contraction piece
  CHECK(tok->encode("IT'S") == Ids{'I', 'T', 259});   // (?i:...)
  CHECK(tok->encode("a   x") == Ids{'a', 260, 261});  // \s+(?!\S) leaves the last space to " x"
  CHECK(tok->encode("4 5") == Ids{'4', ' ', '5'});    // digits never merge across the space
  // Equal ranks merge leftmost first, in short pieces and in long (heap) ones.
  CHECK(tok->encode("aaa") == Ids{264, 'a'});
  for (size_t n : {63, 64, 65, 301}) {
    Ids expected(n / 2, 264);
    if (n % 2) expected.push_back('a');
    CHECK(tok->encode(std::string(n, 'a')) == expected);
  }
}

TEST_CASE("tokenizer: HF tokenizer.json byte-level BPE follows merge order") {
  TempDir dir;
  write_file(dir.file("tokenizer.json"), tokenizer_json_text());
  auto tok = titan::load_tokenizer(dir.file("tokenizer.json"));
  CHECK(tok->vocab_size() == 267);
  CHECK(tok->bos_id() == 265);
  CHECK(tok->eos_id() == 266);
  CHECK(tok->encode("hello world") == Ids{259, 264});
  CHECK(tok->encode(" wor") == Ids{262});
  CHECK(tok->encode("held") == Ids{256, 263});
  CHECK(tok->decode({265, 259, 264, 266}) == "<|begin_of_text|>hello world<|end_of_text|>");
  check_round_trips(*tok);
}

TEST_CASE("tokenizer: bytes tokenizer") {
  auto tok = titan::load_tokenizer("bytes");
  CHECK(tok->vocab_size() == 258);
  CHECK(tok->bos_id() == 256);
  CHECK(tok->eos_id() == 257);
  CHECK(tok->encode("Az\xff") == Ids{'A', 'z', 255});
  CHECK_THROWS_AS(tok->decode({300}), titan::Error);
  check_round_trips(*tok);
}

TEST_CASE("tokenizer: errors name the file and the problem") {
  TempDir dir;
  auto message_of = [](const std::string& path) -> std::string {
    try {
      titan::load_tokenizer(path);
    } catch (const titan::Error& e) {
      return e.what();
    }
    return "no error";
  };
  std::string missing = message_of(dir.file("nope.model"));
  CHECK(missing.find("nope.model") != std::string::npos);
  CHECK(missing.find("not found") != std::string::npos);
  CHECK(missing.find("tokenizer_path") != std::string::npos);

  write_file(dir.file("bad.model"), tiktoken_file_text() + "!!notbase64 999\n");
  std::string bad = message_of(dir.file("bad.model"));
  CHECK(bad.find("bad.model' line 267") != std::string::npos);

  std::string no_bytes;  // every byte but 'q'
  for (int b = 0; b < 256; ++b) {
    if (b != 'q') no_bytes += base64(std::string(1, char(b))) + " " + std::to_string(b) + "\n";
  }
  write_file(dir.file("gap.model"), no_bytes);
  CHECK(message_of(dir.file("gap.model")).find("single byte 113") != std::string::npos);

  write_file(dir.file("broken.json"), "{\"model\": {\"vocab\": ");
  CHECK(message_of(dir.file("broken.json")).find("broken.json' is not valid JSON") != std::string::npos);
  write_file(dir.file("empty.model"), "\n\n");
  CHECK(message_of(dir.file("empty.model")).find("is empty") != std::string::npos);
  std::string spm = R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "decoder": {"type": "Metaspace"}})";
  write_file(dir.file("spm.json"), spm);
  CHECK(message_of(dir.file("spm.json")).find("not a byte-level BPE") != std::string::npos);
}

TEST_CASE("tokenizer: BPE trainer merges the most frequent pair, ties to the smaller ids") {
  TempDir dir;
  titan::BpeTrainingOptions options;
  options.vocab_size = 261;  // 3 merges + BOS + EOS
  titan::train_bpe_tokenizer({"ab ab ab cd"}, options, dir.file("tiny.json"));
  auto tok = titan::load_tokenizer(dir.file("tiny.json"));
  CHECK(tok->vocab_size() == 261);
  CHECK(tok->bos_id() == 259);
  CHECK(tok->eos_id() == 260);
  CHECK(tok->encode("ab") == Ids{256});        // (a, b) seen 3 times
  CHECK(tok->encode(" ab") == Ids{257});       // then (" ", ab) twice
  CHECK(tok->encode(" cd") == Ids{258, 'd'});  // (" ", c) and (c, d) tie: ' ' < 'c'
  CHECK(tok->decode({259, 257, 260}) == "<|begin_of_text|> ab<|end_of_text|>");
  CHECK_THROWS_AS(titan::train_bpe_tokenizer({"x"}, titan::BpeTrainingOptions{100, 1 << 20}, dir.file("t.json")),
                  titan::Error);
}

TEST_CASE("tokenizer: trained BPE is deterministic, compresses, and round-trips") {
  TempDir dir;
  auto docs = story_corpus(400);
  titan::BpeTrainingOptions options;
  options.vocab_size = 700;
  titan::train_bpe_tokenizer(docs, options, dir.file("a.json"));
  titan::train_bpe_tokenizer(docs, options, dir.file("b.json"));
  CHECK(read_file(dir.file("a.json")) == read_file(dir.file("b.json")));
  auto tok = titan::load_tokenizer(dir.file("a.json"));
  CHECK(tok->vocab_size() == 700);
  CHECK(tok->bos_id() == 698);
  CHECK(tok->eos_id() == 699);
  CHECK(tok->encode(" the").size() == 1);
  size_t bytes = 0, tokens = 0;
  for (int i = 1000; i < 1020; ++i) {
    std::string story = titan::generate_story(7, i);
    Ids ids = tok->encode(story);
    CHECK(tok->decode(ids) == story);
    bytes += story.size();
    tokens += ids.size();
  }
  CHECK(double(bytes) / double(tokens) > 2.5);  // bytes per token; 1.0 without merges
  check_round_trips(*tok);

  // max_bytes caps the corpus: a 1-byte budget learns nothing.
  titan::train_bpe_tokenizer(docs, titan::BpeTrainingOptions{700, 1}, dir.file("c.json"));
  CHECK(titan::load_tokenizer(dir.file("c.json"))->vocab_size() == 258);
}
