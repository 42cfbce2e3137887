// Typed, checked reads of a run's YAML: every value read names its file,
// line, column and key path on error; keys never read are reported as
// unknown (with a did-you-mean); defaults are written back so the resolved
// config can be saved; and every option read is documented for `inspect`.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
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

}  // namespace titan
