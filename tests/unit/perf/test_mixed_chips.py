"""On a cluster that mixes 910B3 and 910C nodes, a cost model prices the chip of the nodes it is for: an estimate
names the chip or asks for one, and a cost moved onto an instance's nodes takes that chip's peaks and calibration."""

import pytest

from ascend_pd.errors import InputError
from ascend_pd.perf.context import chip_group_costs, cost_model
from ascend_pd.hardware import load_cluster
from ascend_pd.models import get_model
from ascend_pd.perf.on_chip import on_nodes, whole_cluster
from ascend_pd.perf.shape import Shape
from tests.cli_runner import run_cli
from tests.mixed_chips import write_clusters

SHAPE = Shape(tp=4)
BATCH, CONTEXT = 128, 512  # per DP rank: a batch large enough that the step's compute, not its weights, shows


@pytest.fixture
def clusters(tmp_path):
    return {key: str(path) for key, path in write_clusters(tmp_path).items()}


def tpot(cost) -> float:
    return cost.tpot(SHAPE, BATCH, CONTEXT)


def test_an_estimate_on_a_mixed_cluster_prices_the_chip_it_names(clusters):
    on_b, on_c = (cost_model("qwen3-32b", clusters["mixed"], chip) for chip in ("910b3", "910c"))
    only_b, only_c = cost_model("qwen3-32b", clusters["910b3"]), cost_model("qwen3-32b", clusters["910c"])
    assert (on_b.chip.id, on_c.chip.id) == ("910b3", "910c")
    assert tpot(on_c) == tpot(only_c)
    assert tpot(on_b) == tpot(only_b)
    assert tpot(on_c) < tpot(on_b)  # 376 against 313 TFLOPS BF16 per device, the same HBM bandwidth


def test_an_estimate_on_a_mixed_cluster_without_a_chip_asks_for_one(clusters):
    with pytest.raises(InputError) as caught:
        cost_model("qwen3-32b", clusters["mixed"])
    assert caught.value.field == "--chip" and caught.value.file == clusters["mixed"]
    assert "910b3 nodes (type a2) and 910c nodes (type a3)" in caught.value.message
    assert "--chip 910b3 or --chip 910c" in caught.value.fix


def test_the_estimate_command_asks_for_a_chip_without_a_traceback(clusters):
    result = run_cli("estimate", "--model", "qwen3-32b", "--cluster", clusters["mixed"], "--role", "decode", "--tp",
                     "4", "--context", "512")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "field '--chip'" in result.stderr and "fix: name the nodes' chip" in result.stderr


def test_a_cost_moved_onto_an_instances_nodes_takes_their_chip_and_group(clusters):
    base = whole_cluster(get_model("qwen3-32b"), load_cluster(clusters["mixed"]), "bf16", "bf16", None)
    on_b, on_c = (on_nodes(base, [node], f"instance on {node}") for node in ("b-00", "c-00"))
    assert on_c.chip.id == "910c" and [n.name for n in on_c.cluster.nodes] == ["c-00"]
    assert on_b.chip.id == "910b3" and [n.name for n in on_b.cluster.nodes] == ["b-00"]
    assert tpot(on_c) == tpot(cost_model("qwen3-32b", clusters["910c"]))
    assert tpot(on_b) == tpot(cost_model("qwen3-32b", clusters["910b3"]))
    with pytest.raises(InputError, match="instance 'x' runs on 910b3 and 910c"):
        on_nodes(base, ["b-00", "c-00"], "instance 'x'")


def test_each_chip_group_gets_its_own_cost_model(clusters):
    costs = chip_group_costs("qwen3-32b", clusters["mixed"])
    assert [(c.chip.id, c.cluster.device_count) for c in costs] == [("910b3", 8), ("910c", 16)]
    assert len(chip_group_costs("qwen3-32b", clusters["910c"])) == 1
