#include "pagedkv/storage/key_rotation.h"

#include <cmath>

namespace pagedkv {

bool keys_are_rotated(DType dtype, int head_dim) {
  return dtype == DType::kInt8 && head_dim >= 2 && static_cast<size_t>(head_dim) <= kMaxRotatedHeadDim &&
         (head_dim & (head_dim - 1)) == 0;
}

void hadamard_rotate(float* x, size_t n) {
  size_t half = 1;
  if (n >= 4) {  // the first two passes at once, per 4 elements: the same sums in the same order
    for (size_t i = 0; i < n; i += 4) {
      const float s01 = x[i] + x[i + 1], d01 = x[i] - x[i + 1];
      const float s23 = x[i + 2] + x[i + 3], d23 = x[i + 2] - x[i + 3];
      x[i] = s01 + s23;
      x[i + 1] = d01 + d23;
      x[i + 2] = s01 - s23;
      x[i + 3] = d01 - d23;
    }
    half = 4;
  }
  for (; half < n; half *= 2)
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
