# Installation (docs/install.md). `cmake --install <build> --prefix DIR` gives:
#   DIR/bin/pagedkv                                    the CLI
#   DIR/lib/libpagedkv.so.*, DIR/lib/libpagedkv.a       the library, shared and static
#   DIR/include/pagedkv/<layer>/*.h, pagedkv/version.h  the public headers of the installed layers
#   DIR/lib/cmake/pagedkv/                              find_package(pagedkv CONFIG)
#   DIR/lib/pkgconfig/pagedkv.pc                        pkg-config
# Only the core library is installed. The network layers (api/, server/, router/, loadgen/, remote/, and any
# later one with its own client library) are not: they are reached through the CLI (`pagedkv
# serve`, `bench serve`, `--remote-cache`), and installing them would make the package carry
# cpp-httplib, prometheus-cpp, libcurl and hiredis. Nor is bench/ (the experiments of `pagedkv bench
# paper`), which stands on loadgen/.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Layers whose headers are installed: every layer compiled into pagedkv_lib. A new layer is
# installed only once it is listed here (tests/install checks each header compiles alone).
set(PAGEDKV_INSTALLED_LAYERS core block prefix manager storage kernels memory model tiers
    scheduler engine workload replay grammar template demo)

# ---- the shared library: libpagedkv.a linked whole into a .so --------------------------------
# The static library's objects are position-independent already (for the Python module), so the
# shared one costs a link, not a second compile. Its private dependencies (xxHash, liburing,
# OpenSSL, OpenMP) stay inside it; users see only fmt, nlohmann_json and Threads.
set(PAGEDKV_SHARED_STUB ${PROJECT_BINARY_DIR}/generated/shared_library.cpp)
file(CONFIGURE OUTPUT ${PAGEDKV_SHARED_STUB}
     CONTENT "// libpagedkv.so is libpagedkv.a whole; CMake wants a target to have a source.\n")
add_library(pagedkv_shared SHARED ${PAGEDKV_SHARED_STUB})
target_link_libraries(pagedkv_shared
  PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,pagedkv_lib>"
  PUBLIC fmt::fmt nlohmann_json::nlohmann_json Threads::Threads)
target_include_directories(pagedkv_shared PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>)
if(NOT PAGEDKV_SANITIZE)  # sanitizer runtimes leave symbols for the executable to provide
  target_link_options(pagedkv_shared PRIVATE LINKER:--no-undefined)  # every dependency linked in
endif()
set_target_properties(pagedkv_shared PROPERTIES
  OUTPUT_NAME pagedkv
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}  # 0.x: a minor release may break ABI
  EXPORT_NAME pagedkv)
set_target_properties(pagedkv_lib PROPERTIES EXPORT_NAME pagedkv_static)
# Users compile the headers as C++20 too (in-tree, CMAKE_CXX_STANDARD already says so).
target_compile_features(pagedkv_shared PUBLIC cxx_std_20)
target_compile_features(pagedkv_lib PUBLIC cxx_std_20)

# ---- what is installed ------------------------------------------------------------------------
set(PAGEDKV_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/pagedkv)
install(TARGETS pagedkv RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS pagedkv_shared EXPORT pagedkv-targets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS pagedkv_lib EXPORT pagedkv-static-targets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
foreach(layer IN LISTS PAGEDKV_INSTALLED_LAYERS)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/pagedkv/${layer}
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/pagedkv FILES_MATCHING PATTERN "*.h")
endforeach()
install(FILES ${PROJECT_BINARY_DIR}/generated/include/pagedkv/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/pagedkv)

# ---- the CMake package: pagedkv::pagedkv (shared), component "static": pagedkv::pagedkv_static -
# The static targets are a file of their own: only a user who asks for them must have the
# libraries the archive still needs at link time (see pagedkvConfig.cmake.in).
install(EXPORT pagedkv-targets NAMESPACE pagedkv:: DESTINATION ${PAGEDKV_CMAKE_DIR})
install(EXPORT pagedkv-static-targets NAMESPACE pagedkv:: DESTINATION ${PAGEDKV_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/pagedkvConfig.cmake.in
  ${PROJECT_BINARY_DIR}/generated/pagedkvConfig.cmake INSTALL_DESTINATION ${PAGEDKV_CMAKE_DIR})
# 0.x: only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/generated/pagedkvConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/generated/pagedkvConfig.cmake
              ${PROJECT_BINARY_DIR}/generated/pagedkvConfigVersion.cmake
        DESTINATION ${PAGEDKV_CMAKE_DIR})

# ---- pkg-config: relocatable (the prefix is found from the .pc file's own place) -------------
file(RELATIVE_PATH PAGEDKV_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" PAGEDKV_PC_TO_PREFIX "${PAGEDKV_PC_TO_PREFIX}")
string(REPLACE ";" " " PAGEDKV_PC_OPENMP_FLAGS "${OpenMP_CXX_FLAGS}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/pagedkv.pc.in ${PROJECT_BINARY_DIR}/generated/pagedkv.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/generated/pagedkv.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
