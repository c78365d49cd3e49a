"""benchmarks/ab_kernels.py against stand-in benchmark binaries whose times are known."""

import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "ab_kernels.py"

# A stand-in for a Google Benchmark binary: its repetitions of BM_Kernel take base, base + 1, ...
# milliseconds (reported in the unit given), and it writes nothing when the filter is not "Kernel".
FAKE = """#!{python}
import json, sys
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
if args["benchmark_filter"] != "Kernel":
    sys.stderr.write("Failed to match any benchmarks\\n")
    sys.exit(0)
scale = {{"ns": 1e6, "us": 1e3, "ms": 1.0}}["{unit}"]
runs = [{{"run_name": "BM_Kernel", "run_type": "iteration", "real_time": ({base} + i) * scale, "time_unit": "{unit}"}}
        for i in range(int(args["benchmark_repetitions"]))]
runs.append({{"run_name": "BM_Kernel", "run_type": "aggregate", "real_time": 1e9, "time_unit": "{unit}"}})
print(json.dumps({{"benchmarks": runs}}))
"""


def fake_binary(tmp_path, name, base, unit):
    path = tmp_path / name
    path.write_text(FAKE.format(python=sys.executable, base=base, unit=unit))
    path.chmod(0o755)
    return path


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60)


def test_compares_the_fast_end_of_every_repetition(tmp_path):
    a = fake_binary(tmp_path, "a", 10, "ns")
    b = fake_binary(tmp_path, "b", 8, "us")
    result = run("--rounds", 2, "--repetitions", 6, "--filter", "Kernel", a, b)
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("BM_Kernel"))
    # A: 10..15 ms twice, B: 8..13 ms twice (the aggregate row ignored); min, p20, median.
    values = [float(v) for v in row.split()[1:]]
    assert values == pytest.approx([10, 11, 12.5, 8, 9, 10.5, 0.8, 9 / 11, 10.5 / 12.5], abs=1e-3)


def test_a_filter_that_matches_nothing_is_an_error(tmp_path):
    a = fake_binary(tmp_path, "a", 10, "ms")
    result = run("--rounds", 1, "--filter", "Other", a, a)
    assert result.returncode != 0
    assert "no benchmark matching 'Other'" in result.stderr


def test_a_missing_binary_is_named(tmp_path):
    a = fake_binary(tmp_path, "a", 10, "ms")
    result = run("--filter", "Kernel", a, tmp_path / "missing")
    assert result.returncode != 0
    assert "missing" in result.stderr and "Traceback" not in result.stderr


def test_rejects_zero_rounds(tmp_path):
    a = fake_binary(tmp_path, "a", 10, "ms")
    result = run("--rounds", 0, "--filter", "Kernel", a, a)
    assert result.returncode == 2
    assert "--rounds" in result.stderr
