"""The example notebook (examples/python/frameloop_host.ipynb) executes from
top to bottom: it starts an appliance on the host backend, sends frames,
plots the latency, changes a parameter live and stops (its cells assert)."""

import os
import pathlib

import pytest

NOTEBOOK = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python" / "frameloop_host.ipynb"


def test_the_example_notebook_executes(tmp_path):
    if os.environ.get("FRAMELOOP_REQUIRE_NOTEBOOK") == "1":
        import nbclient
        import nbformat
    else:
        nbclient = pytest.importorskip("nbclient")
        nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(str(NOTEBOOK), as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 3, "the latency plot, an output frame, and the change"
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "all equal to the CPU chain" in text and "'processed': 301" in text
