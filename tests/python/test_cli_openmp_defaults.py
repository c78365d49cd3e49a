"""The CLI's OpenMP default (tools/pagedkv/openmp_defaults.cpp): with neither OMP_WAIT_POLICY nor
GOMP_SPINCOUNT set, `pagedkv` re-executes itself with GOMP_SPINCOUNT=3000 (idle kernel threads
spin briefly, then sleep); a policy the user set is left alone. Read from the running server's
/proc/PID/environ, the environment libgomp read at start-up."""

import pathlib

import pytest

from serve_support import Server


def environment_of(pid):
    raw = pathlib.Path(f"/proc/{pid}/environ").read_bytes()
    return dict(entry.split("=", 1) for entry in raw.decode(errors="replace").split("\0") if "=" in entry)


@pytest.mark.skipif(not pathlib.Path("/proc/self/environ").exists(), reason="needs /proc")
def test_unset_policy_gets_a_bounded_spin():
    with Server(env={"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None}) as server:
        env = environment_of(server.proc.pid)
    assert env.get("GOMP_SPINCOUNT") == "3000"
    assert "OMP_WAIT_POLICY" not in env


@pytest.mark.skipif(not pathlib.Path("/proc/self/environ").exists(), reason="needs /proc")
@pytest.mark.parametrize("name,value", [("OMP_WAIT_POLICY", "passive"), ("OMP_WAIT_POLICY", "active"),
                                        ("GOMP_SPINCOUNT", "77")])
def test_a_policy_the_user_set_is_kept(name, value):
    other = "GOMP_SPINCOUNT" if name == "OMP_WAIT_POLICY" else "OMP_WAIT_POLICY"
    with Server(env={name: value, other: None}) as server:
        env = environment_of(server.proc.pid)
    assert env.get(name) == value
    assert other not in env
