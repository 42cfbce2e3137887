// GPT-2's byte-to-unicode table: printable Latin-1 bytes stand for
// themselves, the other 68 bytes take code points 256, 257, ... in byte order.
#include "byte_level.hpp"

#include <array>
#include <cstdint>

namespace titan::tokenizer {

namespace {

bool stands_for_itself(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

struct Table {
  std::array<uint32_t, 256> code_point{};
  std::array<int, 512> byte_of{};  // every mapped code point is < 512
  Table() {
    byte_of.fill(-1);
    uint32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      code_point[static_cast<size_t>(b)] = stands_for_itself(b) ? static_cast<uint32_t>(b) : extra++;
      byte_of[code_point[static_cast<size_t>(b)]] = b;
    }
  }
};

const Table& table() {
  static const Table t;
  return t;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {  // the table only needs code points below 0x800
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

std::string bytes_to_vocab_string(std::string_view bytes) {
  const Table& t = table();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(t.code_point[static_cast<unsigned char>(c)], out);
  return out;
}

std::optional<std::string> vocab_string_to_bytes(std::string_view text) {
  const Table& t = table();
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    auto c0 = static_cast<unsigned char>(text[i]);
    uint32_t cp;
    if (c0 < 0x80) {
      cp = c0;
      i += 1;
    } else if ((c0 & 0xE0) == 0xC0 && i + 1 < text.size() && (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80) {
      cp = ((c0 & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      return std::nullopt;  // 3- and 4-byte characters are never in the table
    }
    if (cp >= t.byte_of.size() || t.byte_of[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(t.byte_of[cp]));
  }
  return out;
}

}  // namespace titan::tokenizer
