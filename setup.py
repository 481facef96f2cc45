"""Package layout: one import name, ``headlens``.

The repository keeps ``probes/``, ``analyses/`` and ``reports/`` at its top (the layout the
project's users asked for); they install as ``headlens.probes``, ``headlens.analyses`` and
``headlens.reports``, and ``src/headlens`` holds only the top package (``__init__``,
``__main__``).  No top-level module named ``probes``, ``analyses`` or ``reports`` is
installed.  Everything else is in ``pyproject.toml``.
"""

from setuptools import find_packages, setup

LAYERS = ("probes", "analyses", "reports")

packages = ["headlens"]
package_dir = {"headlens": "src/headlens"}
for layer in LAYERS:
    package_dir[f"headlens.{layer}"] = layer
    packages += [f"headlens.{layer}"] + [f"headlens.{layer}.{sub}" for sub in find_packages(layer)]

# bin/headlens: the `headlens` command, installed as a script (not an entry point), so that it can
# answer --help, --version and usage errors before headlens/__init__ imports the library's namespace
# (any `headlens.x` import runs that first) while installing no second import name.
setup(packages=packages, package_dir=package_dir, scripts=["bin/headlens"])
