// The dashboard's page (HTML, CSS and JavaScript in one file, no dependencies), embedded in the
// binary at build time from src/server/dashboard/index.html. It polls GET /dashboard/state.
#pragma once

#include <string_view>

namespace pagedkv::server {

std::string_view dashboard_page();

}  // namespace pagedkv::server
