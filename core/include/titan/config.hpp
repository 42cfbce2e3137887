// Typed, checked reads of a run's YAML: every value read names its file,
// line, column and key path on error; keys never read are reported as
// unknown (with a did-you-mean); defaults are written back so the resolved
// config can be saved; and every option read is documented for `inspect`.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "titan/error.hpp"

namespace titan {

class ConfigError : public Error {
 public:
  using Error::Error;
};

// One option a plugin or section reads: shown by `titan plugins inspect`.
struct OptionDoc {
  std::string key;     // path relative to the node it was read from
  std::string type;    // "int", "float", "bool", "string", "list[string]", ...
  std::string fallback;  // default as YAML text; empty when required
  std::string doc;
};

// Which parallelism degrees an option accepts (ConfigNode::degree).
enum class Degree {
  allow_rest,    // >= 1, or -1: the ranks the other mesh dims leave
  at_least_one,  // >= 1 only
};

// The numbers an option accepts (ConfigNode::number). NaN and the
// infinities are never in a range: no option means anything by them, and
// converting one to an integer is undefined behaviour.
class NumberRange {
 public:
  static NumberRange at_least(double low);                // [low, inf)
  static NumberRange above(double low);                   // (low, inf)
  static NumberRange closed(double low, double high);     // [low, high]
  static NumberRange half_open(double low, double high);  // [low, high)
  bool contains(double value) const;
  std::string text() const;  // as errors say it: "a finite number >= 0", "a number in [0, 1)"

 private:
  NumberRange(double low, bool low_included, double high, bool high_included);
  double low_;
  double high_;  // +inf: no upper bound
  bool low_included_;
  bool high_included_;
};

class ConfigNode {
 public:
  ConfigNode();  // an empty mapping named "<empty>"
  static ConfigNode load_file(const std::string& path);
  static ConfigNode parse(const std::string& yaml_text, const std::string& source_name);

  bool has(const std::string& key) const;
  // Typed read; the fallback is stored back into the tree when absent.
  // T is one of bool, int, int64_t, double, std::string,
  // std::vector<std::string>, std::vector<int64_t>, std::vector<double>,
  // std::vector<std::vector<std::string>>.
  template <class T>
  T get(const std::string& key, const T& fallback, const std::string& doc = "") const;
  template <class T>
  T require(const std::string& key, const std::string& doc = "") const;
  std::string choice(const std::string& key, const std::string& fallback,
                     const std::vector<std::string>& allowed, const std::string& doc = "") const;
  // The same choice mapped to an enum: `table` pairs each name users write
  // with its value; synonyms are rows with the same value (FSDP2's
  // true/false for always/never). Errors list every name.
  template <class Enum, class = std::enable_if_t<std::is_enum_v<Enum>>>
  Enum choice(const std::string& key, Enum fallback, const std::vector<std::pair<std::string, Enum>>& table,
              const std::string& doc = "") const;
  // A parallelism degree (a mesh dim's size): an int >= 1, or -1 where
  // `allowed` lets the dim take the ranks the other dims leave.
  int64_t degree(const std::string& key, int64_t fallback, const std::string& doc,
                 Degree allowed = Degree::allow_rest) const;
  // A float in `range`; fails with "expected <range>, got <value>".
  double number(const std::string& key, double fallback, const NumberRange& range,
                const std::string& doc = "") const;

  // A nested mapping (created empty when absent).
  ConfigNode child(const std::string& key) const;
  // Elements of a sequence of mappings (empty when absent).
  std::vector<ConfigNode> children(const std::string& key) const;
  std::vector<std::string> keys() const;

  // Applies `a.b.c=value` (value parsed as YAML). In a sequence of mappings
  // a path part selects the element by index or by its `name:` field.
  void apply_override(const std::string& assignment);

  // Throws ConfigError naming the first key under this node that nobody read.
  void check_unknown_keys() const;

  // Marks a key (and its subtree) as read without reading it.
  void mark_used(const std::string& key) const;

  std::string path() const;                       // e.g. "training" or "plugins[1]"
  std::string where(const std::string& key = "") const;  // "file:line:col"
  std::string source() const;                     // the file name
  std::string dump() const;                       // YAML text of this subtree
  const std::vector<OptionDoc>& documented() const;  // options read under this node

  [[noreturn]] void fail(const std::string& key, const std::string& message) const;

  struct State;

 private:
  ConfigNode(std::shared_ptr<State> state, std::shared_ptr<void> node, std::string path);
  std::shared_ptr<State> state_;
  std::shared_ptr<void> node_;  // YAML::Node, kept out of this header
  std::string path_;
};

// "did you mean" helper shared by config and registry errors.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

// In the header because it is a template: plugins instantiate it with their
// own enums. The string choice() reads, documents and checks the name.
template <class Enum, class>
Enum ConfigNode::choice(const std::string& key, Enum fallback, const std::vector<std::pair<std::string, Enum>>& table,
                        const std::string& doc) const {
  std::vector<std::string> names;
  const std::string* fallback_name = nullptr;
  for (const auto& row : table) {
    names.push_back(row.first);
    if (!fallback_name && row.second == fallback) fallback_name = &row.first;
  }
  if (!fallback_name) {
    throw Error(path() + (path().empty() ? "" : ".") + key + ": the default value is not in the table of choices");
  }
  const std::string chosen = choice(key, *fallback_name, names, doc);
  for (const auto& [name, value] : table) {
    if (name == chosen) return value;
  }
  return fallback;  // not reached: choice() accepts only names of the table
}

}  // namespace titan
