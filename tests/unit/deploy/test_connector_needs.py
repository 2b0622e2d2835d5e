"""The one table of what each KV connector and mode needs: complete, in step with render and with docs/planner.md."""

from pathlib import Path

from ascend_pd.deploy.connector_needs import CONNECTOR_NEEDS, needs_markdown, needs_sentence
from ascend_pd.deploy.schema import Connector
from ascend_pd.render.kv_config import VLLM_ASCEND_CONNECTORS

DOCS = Path(__file__).resolve().parents[3] / "docs" / "planner.md"


def test_every_implementation_and_mode_the_schema_allows_has_one_row():
    implementations = Connector.model_fields["implementation"].annotation.__args__
    modes = Connector.model_fields["mode"].annotation.__args__
    assert sorted((n.implementation, n.mode) for n in CONNECTOR_NEEDS) == sorted(
        (i, m) for i in implementations for m in modes)


def test_the_vllm_ascend_rows_name_the_connector_render_writes():
    for n in CONNECTOR_NEEDS:
        if n.implementation == "vllm-ascend":
            assert n.connector == VLLM_ASCEND_CONNECTORS[n.mode]


def test_push_needs_cann_8_5_rc1_over_the_ascend_protocol_only():
    assert "CANN 8.5.RC1 or later" in needs_sentence("ascend-pd", "push", "ascend")
    assert "CANN" not in needs_sentence("ascend-pd", "push", "tcp")


def test_docs_planner_md_shows_the_table_as_the_code_holds_it():
    assert needs_markdown() in DOCS.read_text(encoding="utf-8"), (
        "docs/planner.md lacks the connector table: paste the output of "
        "`python -c 'from ascend_pd.deploy.connector_needs import needs_markdown; print(needs_markdown())'`")
