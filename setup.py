"""pip's build of the pagedkv Python module: setuptools asks CMake for it (docs/install.md).

    pip install --no-build-isolation --no-index .      # configures and builds in build-python/
    PAGEDKV_CMAKE_BUILD_DIR=build pip install ...      # reuses a configured CMake build tree
                                                       # (setuptools' staging goes there too)

The module is an extension that is itself the package's __init__ (pagedkv/__init__.*.so), so the
package can carry its type stub (__init__.pyi) and the PEP 561 marker py.typed while
`import pagedkv` and every class name stay exactly what they are in the build tree.
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent
REUSED_BUILD = os.environ.get("PAGEDKV_CMAKE_BUILD_DIR")
# setuptools' own build folders: inside the reused CMake tree, else build-python/ (with CMake's).
STAGING = pathlib.Path(REUSED_BUILD).resolve() / "setuptools" if REUSED_BUILD else ROOT / "build-python"


def project_version() -> str:
    """The version is written once, in CMakeLists.txt's project(VERSION)."""
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(pagedkv\s+VERSION\s+([0-9.]+)", text).group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        build_dir = pathlib.Path(REUSED_BUILD).resolve() if REUSED_BUILD else STAGING / "cmake"
        if not (build_dir / "CMakeCache.txt").exists():
            if REUSED_BUILD:
                sys.exit(f"PAGEDKV_CMAKE_BUILD_DIR={REUSED_BUILD} is not a configured CMake build tree")
            # Only what the module needs: no tests, no benchmarks, warnings not fatal on other compilers.
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            self.spawn(["cmake", "-S", str(ROOT), "-B", str(build_dir), *generator,
                        "-DCMAKE_BUILD_TYPE=Release", f"-DPython3_EXECUTABLE={sys.executable}",
                        "-DPAGEDKV_BUILD_TESTS=OFF", "-DPAGEDKV_BUILD_BENCHMARKS=OFF",
                        "-DPAGEDKV_WERROR=OFF"])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        self.spawn(["cmake", "--build", str(build_dir), "--target", "pagedkv_python", "-j", jobs])

        built = build_dir / "python" / f"pagedkv{sysconfig.get_config_var('EXT_SUFFIX')}"
        if not built.exists():
            found = sorted(p.name for p in (build_dir / "python").glob("pagedkv*.so"))
            sys.exit(f"{built} is missing (the build tree has {found}): it was configured for another Python")
        target = pathlib.Path(self.get_ext_fullpath(ext.name))  # <build_lib>/pagedkv/__init__<suffix>
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)
        shutil.copyfile(ROOT / "bindings" / "python" / "pagedkv.pyi", target.parent / "__init__.pyi")
        (target.parent / "py.typed").write_text("")


STAGING.mkdir(parents=True, exist_ok=True)
setup(
    version=project_version(),
    packages=[],  # no Python sources: the package is the extension below, stub and marker
    ext_modules=[Extension("pagedkv.__init__", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": str(STAGING)}, "egg_info": {"egg_base": str(STAGING)}},
)
