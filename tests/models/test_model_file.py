"""``model:`` as a YAML file in the catalog's format (the real executor writes its scaled model
there), with one-line errors; and the ``fp32`` precision it uses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specmd_sim.errors import SpecmdError
from specmd_sim.models import load_model
from specmd_sim.models.precision import precision


def test_a_model_file_loads_like_a_catalog_entry(tmp_path: Path) -> None:
    data = load_model("olmoe-1b-7b").model_dump(mode="json")
    data.update(id="my-olmoe", hidden_size=512, expert_dtype="fp32")
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    model = load_model(str(path))
    assert model.id == "my-olmoe" and model.expert_bytes == 3 * 512 * 1024 * 4
    assert precision("fp32").bytes_per_param == 4


def test_model_file_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(SpecmdError, match="expected a readable model file"):
        load_model(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: x\nname: y\n")
    with pytest.raises(SpecmdError, match=r"model: .*bad.yaml: source: Field required"):
        load_model(str(bad))
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [")
    with pytest.raises(SpecmdError, match="expected YAML"):
        load_model(str(broken))
