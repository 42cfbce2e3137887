// Sums of squares in fp64 over raw CPU buffers, for the gradient norm:
// one pass, no fp64 copy of the gradient, no ATen op per gradient.
// sum_of_squares.cpp holds the loops only, built optimized (the vectorizer
// needs -O2) whatever the build type; grad_clip.cpp splits a gradient into
// blocks and runs them on ATen's threads.
#pragma once
#include <cstdint>

namespace titan {

// Σ x² of n elements, accumulated in fp64 in 8 interleaved lanes that are
// added in a fixed order: the same bits for the same input, on any machine
// this binary runs on.
double sum_of_squares(const float* x, int64_t n);
double sum_of_squares(const double* x, int64_t n);
// bfloat16 as its raw 16 bits (the upper half of a float).
double sum_of_squares_bf16(const uint16_t* x, int64_t n);

}  // namespace titan
