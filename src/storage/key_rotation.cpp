#include "pagedkv/storage/key_rotation.h"

#include <cmath>

namespace pagedkv {

bool keys_are_rotated(DType dtype, int head_dim) {
  return dtype == DType::kInt8 && head_dim >= 2 && static_cast<size_t>(head_dim) <= kMaxRotatedHeadDim &&
         (head_dim & (head_dim - 1)) == 0;
}

void hadamard_rotate(float* x, size_t n) {
  for (size_t half = 1; half < n; half *= 2)
    for (size_t i = 0; i < n; i += 2 * half)
      for (size_t j = i; j < i + half; ++j) {
        const float a = x[j], b = x[j + half];
        x[j] = a + b;
        x[j + half] = a - b;
      }
  const float norm = 1.0f / std::sqrt(static_cast<float>(n));
  for (size_t i = 0; i < n; ++i) x[i] *= norm;
}

}  // namespace pagedkv
