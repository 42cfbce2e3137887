// ConfigNode over yaml-cpp: typed reads with file:line:col errors, a record
// of the keys read (for unknown-key errors and `plugins inspect`), --set
// overrides and the resolved dump.
#include <c10/util/StringUtil.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "titan/config.hpp"

namespace titan {

struct ConfigNode::State {
  std::string source;
  YAML::Node root;
  std::map<std::string, std::set<std::string>> read_keys;  // node path -> keys
  std::map<std::string, std::vector<OptionDoc>> docs;       // node path -> options
  std::set<std::string> opaque;                             // subtrees not checked
  std::set<std::string> overridden;                         // full paths set by --set
};

namespace {

YAML::Node& yaml_of(const std::shared_ptr<void>& node) { return *static_cast<YAML::Node*>(node.get()); }

std::shared_ptr<void> hold(const YAML::Node& node) { return std::make_shared<YAML::Node>(node); }

std::string join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string mark_text(const std::string& source, const YAML::Mark& mark) {
  if (mark.is_null() || mark.line < 0) return source;
  return source + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

std::string scalar_text(const YAML::Node& node) {
  if (node.IsScalar()) return "\"" + node.Scalar() + "\"";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "nothing";
}

// A YAML key can itself be a list or a mapping (`[a, b]: 1`, `? {a: 1}`);
// Titan's keys are names, so say that, with the place, rather than let
// yaml-cpp's "bad conversion" out. A null key reads "null", as before.
std::string key_name(const YAML::Node& key, const std::string& source, const std::string& path) {
  if (key.IsNull()) return "null";
  if (!key.IsScalar()) {
    throw ConfigError(mark_text(source, key.Mark()) + ": " + (path.empty() ? "" : path + ": ") +
                      "expected a key name, got " + scalar_text(key));
  }
  return key.Scalar();
}

template <class T>
struct Kind;
template <> struct Kind<bool> { static constexpr const char* name = "bool"; };
template <> struct Kind<int> { static constexpr const char* name = "int"; };
template <> struct Kind<int64_t> { static constexpr const char* name = "int"; };
template <> struct Kind<double> { static constexpr const char* name = "float"; };
template <> struct Kind<std::string> { static constexpr const char* name = "string"; };
template <> struct Kind<std::vector<std::string>> { static constexpr const char* name = "list[string]"; };
template <> struct Kind<std::vector<int64_t>> { static constexpr const char* name = "list[int]"; };
template <> struct Kind<std::vector<double>> { static constexpr const char* name = "list[float]"; };
template <> struct Kind<std::vector<std::vector<std::string>>> {
  static constexpr const char* name = "list[list[string]]";
};

template <class T>
std::string yaml_text(const T& value) {
  YAML::Emitter out;
  out << YAML::Flow << value;
  return out.c_str();
}

// Converts one scalar; returns false when the text is not a T.
template <class T>
bool convert_scalar(const YAML::Node& node, T& out) {
  if (!node.IsScalar()) return false;
  try {
    out = node.as<T>();
  } catch (const YAML::Exception&) {
    return false;
  }
  if constexpr (std::is_same_v<T, std::string>) return true;
  return true;
}

template <class T>
bool convert(const YAML::Node& node, T& out) {
  if constexpr (std::is_same_v<T, int> || std::is_same_v<T, int64_t>) {
    // yaml-cpp accepts "1.5" -> 1 for ints in some versions; insist on digits.
    if (!node.IsScalar()) return false;
    const std::string& text = node.Scalar();
    size_t used = 0;
    try {
      long long value = std::stoll(text, &used, 0);
      if (used != text.size()) return false;
      out = static_cast<T>(value);
      return true;
    } catch (const std::exception&) {
      return false;
    }
  } else if constexpr (std::is_same_v<T, std::vector<std::string>> ||
                       std::is_same_v<T, std::vector<int64_t>> ||
                       std::is_same_v<T, std::vector<double>> ||
                       std::is_same_v<T, std::vector<std::vector<std::string>>>) {
    if (!node.IsSequence()) return false;
    out.clear();
    for (const auto& element : node) {
      typename T::value_type value{};
      if (!convert(element, value)) return false;
      out.push_back(value);
    }
    return true;
  } else {
    return convert_scalar(node, out);
  }
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& candidate : candidates) {
    size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

ConfigNode::ConfigNode() : ConfigNode(parse("{}", "<empty>")) {}

ConfigNode::ConfigNode(std::shared_ptr<State> state, std::shared_ptr<void> node, std::string path)
    : state_(std::move(state)), node_(std::move(node)), path_(std::move(path)) {}

ConfigNode ConfigNode::parse(const std::string& yaml_text, const std::string& source_name) {
  auto state = std::make_shared<State>();
  state->source = source_name;
  try {
    state->root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& error) {
    throw ConfigError(mark_text(source_name, error.mark) + ": YAML syntax error: " + error.msg);
  }
  if (!state->root.IsDefined() || state->root.IsNull()) state->root = YAML::Node(YAML::NodeType::Map);
  if (!state->root.IsMap()) {
    throw ConfigError(mark_text(source_name, state->root.Mark()) +
                      ": expected a YAML mapping of sections (job:, model:, training:, ...), got " +
                      scalar_text(state->root));
  }
  return ConfigNode(state, hold(state->root), "");
}

ConfigNode ConfigNode::load_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("config file '" + path + "' cannot be read (does it exist?)");
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

bool ConfigNode::has(const std::string& key) const {
  const YAML::Node& node = yaml_of(node_);
  return node.IsMap() && node[key].IsDefined() && !node[key].IsNull();
}

std::string ConfigNode::where(const std::string& key) const {
  const YAML::Node& node = yaml_of(node_);
  std::string full = join(path_, key);
  if (state_->overridden.count(full)) return "--set " + full;
  if (!key.empty() && node.IsMap() && node[key].IsDefined()) {
    YAML::Mark mark = node[key].Mark();
    if (!mark.is_null()) return mark_text(state_->source, mark);
  }
  return mark_text(state_->source, node.Mark());
}

void ConfigNode::fail(const std::string& key, const std::string& message) const {
  throw ConfigError(where(key) + ": " + join(path_, key) + ": " + message);
}

template <class T>
T ConfigNode::get(const std::string& key, const T& fallback, const std::string& doc) const {
  state_->read_keys[path_].insert(key);
  auto& docs = state_->docs[path_];
  if (std::none_of(docs.begin(), docs.end(), [&](const OptionDoc& d) { return d.key == key; })) {
    docs.push_back({key, Kind<T>::name, yaml_text(fallback), doc});
  }
  YAML::Node& node = yaml_of(node_);
  if (!has(key)) {
    node[key] = fallback;
    return fallback;
  }
  T value{};
  if (!convert(node[key], value)) {
    fail(key, std::string("expected ") + Kind<T>::name + ", got " + scalar_text(node[key]));
  }
  return value;
}

template <class T>
T ConfigNode::require(const std::string& key, const std::string& doc) const {
  state_->read_keys[path_].insert(key);
  auto& docs = state_->docs[path_];
  if (std::none_of(docs.begin(), docs.end(), [&](const OptionDoc& d) { return d.key == key; })) {
    docs.push_back({key, Kind<T>::name, "", doc});
  }
  if (!has(key)) fail(key, std::string("required ") + Kind<T>::name + " is missing");
  T value{};
  if (!convert(yaml_of(node_)[key], value)) {
    fail(key, std::string("expected ") + Kind<T>::name + ", got " + scalar_text(yaml_of(node_)[key]));
  }
  return value;
}

#define TITAN_CONFIG_TYPE(T)                                                            \
  template T ConfigNode::get<T>(const std::string&, const T&, const std::string&) const; \
  template T ConfigNode::require<T>(const std::string&, const std::string&) const;
TITAN_CONFIG_TYPE(bool)
TITAN_CONFIG_TYPE(int)
TITAN_CONFIG_TYPE(int64_t)
TITAN_CONFIG_TYPE(double)
TITAN_CONFIG_TYPE(std::string)
TITAN_CONFIG_TYPE(std::vector<std::string>)
TITAN_CONFIG_TYPE(std::vector<int64_t>)
TITAN_CONFIG_TYPE(std::vector<double>)
TITAN_CONFIG_TYPE(std::vector<std::vector<std::string>>)
#undef TITAN_CONFIG_TYPE

std::string ConfigNode::choice(const std::string& key, const std::string& fallback,
                               const std::vector<std::string>& allowed, const std::string& doc) const {
  std::string full_doc = doc + (doc.empty() ? "" : " ") + "{" + c10::Join(", ", allowed) + "}";
  std::string value = get<std::string>(key, fallback, full_doc);
  if (std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
    std::string hint = closest_match(value, allowed);
    fail(key, "expected one of {" + c10::Join(", ", allowed) + "}, got \"" + value + "\"" +
                  (hint.empty() ? "" : "; did you mean \"" + hint + "\"?"));
  }
  return value;
}

ConfigNode ConfigNode::child(const std::string& key) const {
  state_->read_keys[path_].insert(key);
  YAML::Node& node = yaml_of(node_);
  if (!has(key)) node[key] = YAML::Node(YAML::NodeType::Map);
  YAML::Node value = node[key];
  if (!value.IsMap()) fail(key, "expected a mapping of options, got " + scalar_text(value));
  return ConfigNode(state_, hold(value), join(path_, key));
}

std::vector<ConfigNode> ConfigNode::children(const std::string& key) const {
  state_->read_keys[path_].insert(key);
  std::vector<ConfigNode> out;
  if (!has(key)) return out;
  YAML::Node value = yaml_of(node_)[key];
  if (!value.IsSequence()) fail(key, "expected a list, got " + scalar_text(value));
  for (size_t i = 0; i < value.size(); ++i) {
    YAML::Node element = value[i];
    std::string element_path = join(path_, key) + "[" + std::to_string(i) + "]";
    if (!element.IsMap()) {
      throw ConfigError(mark_text(state_->source, element.Mark()) + ": " + element_path +
                        ": expected a mapping (e.g. `- name: fsdp`), got " + scalar_text(element));
    }
    out.push_back(ConfigNode(state_, hold(element), element_path));
  }
  return out;
}

std::vector<std::string> ConfigNode::keys() const {
  std::vector<std::string> out;
  const YAML::Node& node = yaml_of(node_);
  if (node.IsMap()) {
    for (const auto& item : node) out.push_back(key_name(item.first, state_->source, path_));
  }
  return out;
}

void ConfigNode::mark_used(const std::string& key) const {
  state_->read_keys[path_].insert(key);
  state_->opaque.insert(join(path_, key));
}

void ConfigNode::apply_override(const std::string& assignment) {
  auto equals = assignment.find('=');
  if (equals == std::string::npos || equals == 0) {
    throw ConfigError("--set " + assignment + ": expected key.path=value (e.g. training.steps=20)");
  }
  std::string path = assignment.substr(0, equals);
  std::string text = assignment.substr(equals + 1);
  std::vector<std::string> parts;
  std::stringstream stream(path);
  for (std::string part; std::getline(stream, part, '.');) {
    if (part.empty()) throw ConfigError("--set " + assignment + ": empty part in key path '" + path + "'");
    parts.push_back(part);
  }
  YAML::Node current = yaml_of(node_);  // a handle: rebind with reset(), never operator=
  std::string resolved = path_;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const std::string& part = parts[i];
    YAML::Node next;
    if (current.IsSequence()) {
      bool found = false;
      for (size_t j = 0; j < current.size() && !found; ++j) {
        bool by_index = part == std::to_string(j);
        bool by_name = current[j].IsMap() && current[j]["name"].IsDefined() &&
                       current[j]["name"].IsScalar() && current[j]["name"].Scalar() == part;
        if (by_index || by_name) {
          next.reset(current[j]);
          resolved += "[" + std::to_string(j) + "]";
          found = true;
        }
      }
      if (!found) {
        throw ConfigError("--set " + assignment + ": '" + resolved + "' has no element named or numbered '" +
                          part + "'");
      }
    } else {
      if (!current.IsMap()) {
        throw ConfigError("--set " + assignment + ": '" + resolved + "' is a value, not a mapping");
      }
      if (!current[part].IsDefined() || current[part].IsNull()) current[part] = YAML::Node(YAML::NodeType::Map);
      next.reset(current[part]);
      resolved = join(resolved, part);
    }
    current.reset(next);
  }
  if (!current.IsMap()) {
    throw ConfigError("--set " + assignment + ": '" + resolved + "' is not a mapping");
  }
  YAML::Node value;
  try {
    value = YAML::Load(text);
  } catch (const YAML::ParserException& error) {
    throw ConfigError("--set " + assignment + ": value is not valid YAML: " + error.msg);
  }
  current[parts.back()] = value;
  state_->overridden.insert(join(resolved, parts.back()));
}

namespace {

void check_tree(const ConfigNode::State& state, const YAML::Node& node, const std::string& path) {
  if (state.opaque.count(path) || !node.IsMap()) return;
  auto found = state.read_keys.find(path);
  std::vector<std::string> known;
  if (found != state.read_keys.end()) known.assign(found->second.begin(), found->second.end());
  for (const auto& item : node) {
    std::string key = key_name(item.first, state.source, path);
    std::string full = join(path, key);
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string where = state.overridden.count(full) ? "--set " + full : mark_text(state.source, item.first.Mark());
      std::string hint = closest_match(key, known);
      throw ConfigError(where + ": " + full + ": unknown key" +
                        (hint.empty() ? "" : "; did you mean '" + hint + "'?") +
                        (known.empty() ? "" : " (known here: " + c10::Join(", ", known) + ")"));
    }
    if (item.second.IsMap()) check_tree(state, item.second, full);
    if (item.second.IsSequence()) {
      for (size_t i = 0; i < item.second.size(); ++i) {
        check_tree(state, item.second[i], full + "[" + std::to_string(i) + "]");
      }
    }
  }
}

}  // namespace

void ConfigNode::check_unknown_keys() const { check_tree(*state_, yaml_of(node_), path_); }

std::string ConfigNode::path() const { return path_; }
std::string ConfigNode::source() const { return state_->source; }

std::string ConfigNode::dump() const {
  YAML::Emitter out;
  out << yaml_of(node_);
  return out.c_str();
}

const std::vector<OptionDoc>& ConfigNode::documented() const { return state_->docs[path_]; }

}  // namespace titan
