"""Write the JSON Schemas of the cluster and deployment files from their pydantic models into
superpod_configs/schemas/, where the package ships them and the example files name them.

Usage: python tools/make_schemas.py   (tests/unit/deploy/test_file_schemas.py fails until this is run after a model
changes)
"""

from __future__ import annotations

from ascend_pd.deploy.file_schemas import MODELS, schema_text, shipped_schema


def main() -> None:
    for kind in MODELS:
        path = shipped_schema(kind)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(schema_text(kind), encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
