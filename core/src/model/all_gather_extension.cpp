// The key function of AllGatherExtension lives in libtitan_core, so its
// type_info is one across plugins and FSDP's dynamic_cast finds a layer
// another plugin built.
#include "titan/all_gather_extension.hpp"

namespace titan {

AllGatherExtension::~AllGatherExtension() = default;

}  // namespace titan
