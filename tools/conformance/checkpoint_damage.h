// Damage to a saved checkpoint that any format must notice, whatever its
// files are: the harness only knows the folder the checkpointer wrote into.
#pragma once
#include <string>
#include <vector>

namespace titan::conformance {

struct Damage {
  std::string name;         // "flip", "truncate", "delete"
  std::string description;  // for the report
};

const std::vector<Damage>& checkpoint_damages();

// Every regular file under `folder`, sorted; empty when none.
std::vector<std::string> files_under(const std::string& folder);

// Applies `damage` to the largest file under `folder` (in place) and says
// what it did ("flipped 8 bytes at 592 of .../embed.bin").
std::string apply_damage(const std::string& damage, const std::string& folder);

// Replaces `to` by a copy of `from` (restores a pristine checkpoint).
void copy_folder(const std::string& from, const std::string& to);

}  // namespace titan::conformance
