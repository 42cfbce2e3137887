// `titan plan --model ...`: the layout search (plan_search_command.cpp),
// dispatched from plan_command.cpp.
#pragma once
#include "commands.h"

namespace titan::cli {

int plan_search_command(const Args& args);

}  // namespace titan::cli
