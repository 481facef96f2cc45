"""``import headlens`` in a Jupyter kernel without ipywidgets prints nothing.

accelerate and transformers import ``tqdm.auto``, whose first import in a kernel (``ipykernel.zmqshell``
loaded) without ipywidgets warns ``TqdmWarning: IProgress not found`` in red.  A fresh interpreter
stands in for the kernel: it loads ``ipykernel.zmqshell`` (what tqdm looks for), hides ipywidgets,
shows every warning, then imports headlens and the model code a first load imports.
"""

from __future__ import annotations

import os
import subprocess
import sys

KERNEL_LIKE = """
import sys, warnings
import ipykernel.zmqshell  # noqa: F401 - what tqdm.auto takes for a notebook
sys.modules["ipywidgets"] = None  # not installed
warnings.simplefilter("always")
import headlens  # noqa: F401
print("IMPORTED", flush=True)
import transformers.models.gpt2.modeling_gpt2  # noqa: F401 - what loading a GPT-2 model imports (accelerate via transformers)
print("MODEL-CODE", flush=True)
"""


def test_import_headlens_in_a_kernel_without_ipywidgets_warns_nothing():
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONWARNINGS": "always"}
    proc = subprocess.run([sys.executable, "-c", KERNEL_LIKE], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["IMPORTED", "MODEL-CODE"]
    assert "IProgress" not in proc.stderr and "TqdmWarning" not in proc.stderr, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr
