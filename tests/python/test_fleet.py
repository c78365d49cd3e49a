"""The fleet's short run (scripts/fleet.sh --short): 6 instances on a 6-node Redis Cluster behind
2 routers, 80 Mooncake requests, while an instance, a router and a Redis master are killed. Every
request sent is answered (streams move, clients retry on the other router), the golden canaries
are unchanged, and the tier's keys are spread over the masters."""

import json
import pathlib
import subprocess

import pytest

from redis_support import redis_available
from serve_support import pagedkv_bin
from test_serve import models_dir

REPO = pathlib.Path(__file__).resolve().parents[2]
TRACE = REPO.parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"


@pytest.mark.skipif(not pagedkv_bin().exists(), reason=f"{pagedkv_bin()} is not built")
def test_fleet_loses_nothing_when_an_instance_a_router_and_a_redis_master_die():
    models_dir()
    if not redis_available():
        pytest.skip("redis-server is missing: scripts/setup.sh installs it")
    if not TRACE.exists():
        pytest.skip(f"{TRACE} is missing")
    out = subprocess.run([str(REPO / "scripts" / "fleet.sh"), "--short", "--json"], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run = json.loads(out.stdout)["runs"][0]
    assert run["answered"] == run["sent"] == 80 and run["failed"] == 0, run
    assert run["canaries_unchanged"], run["canaries"]
    assert [what.split(" ")[0] for _, what in run["faults"]][:1] == ["instance"] and len(run["faults"]) == 3, run["faults"]
    assert run["retried"] > 0  # the killed router's clients went to the other one
    assert len(run["keys_per_master"]) >= 2 and all(k > 0 for k in run["keys_per_master"]), run["keys_per_master"]
