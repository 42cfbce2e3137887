// Includes LibTorch, then doctest: LibTorch brings glog's CHECK macros,
// which would silently replace doctest's, so they are removed in between.
#pragma once
#include <ATen/ATen.h>
#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#include <doctest/doctest.h>
