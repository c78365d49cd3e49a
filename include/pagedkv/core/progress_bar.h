// The one progress bar every command draws: "[██████▌     ]", the done fraction in cells of
// eighth blocks, so that `pagedkv demo` and `pagedkv replay` show progress the same way.
#pragma once

#include <string>

namespace pagedkv {

// The bar for `fraction` in [0, 1] (clamped; NaN counts as 0), `width` cells (at least 1)
// inside the brackets.
std::string progress_bar(double fraction, int width);

}  // namespace pagedkv
