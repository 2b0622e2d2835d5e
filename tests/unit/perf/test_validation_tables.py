"""docs/planner.md's validation tables and validation.yaml (which the plan report quotes) are what the data and the
model give now: both are regenerated from measurements.yaml and compared."""

import pytest
import yaml

from ascend_pd.perf import refit_shipped
from ascend_pd.perf.calibration import shipped_profiles
from ascend_pd.perf.published import VALIDATION_FILE

# The refit with every source left out (a minute of one core) is computed once per process: the tests that
# read it run in one pytest-xdist worker (make: --dist loadgroup).
pytestmark = pytest.mark.xdist_group("refit")


def test_the_docs_tables_print_from_the_data():
    text = refit_shipped.DOCS_FILE.read_text(encoding="utf-8")
    block = text.split(refit_shipped.BEGIN, 1)[1].split(refit_shipped.END, 1)[0]
    assert block.strip() == refit_shipped.tables(shipped_profiles()).strip(), \
        "run `python -m ascend_pd.perf.refit_shipped --write` and review the diff"


def test_validation_yaml_is_the_refit_of_the_data():
    stored = yaml.safe_load(VALIDATION_FILE.read_text(encoding="utf-8"))
    assert stored == {name: refit_shipped.validation(name) for name in shipped_profiles()}, \
        "run `python -m ascend_pd.perf.refit_shipped --write` and review the diff"


def test_the_picture_of_the_rows_is_drawn_and_shown():
    picture = refit_shipped.plot_path("vllm-ascend")
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"]({picture.name})" in refit_shipped.DOCS_FILE.read_text(encoding="utf-8")
