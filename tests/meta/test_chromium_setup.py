"""The browser tests' set-up (issue 47 item 9): ``scripts/bootstrap.sh test``, the README's set-up, runs
scripts/chromium.sh, which installs Debian's chromium where no browser is found, as .ci/run did alone.

The script runs for real with a PATH of stand-ins only (``id``, ``sudo``, ``apt-get`` that record their
arguments; nothing is installed, nothing reaches the network) and ``DEBIAN_CHROMIUM`` pointed at a
file that does not exist until the stand-in ``apt-get install`` writes it.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "chromium.sh"
BROWSER_TESTS = REPO_ROOT / "tests" / "e2e" / "test_report_browser.py"


def _skip_reason() -> str:
    """The browser tests' skip reason, CHROMIUM_MISSING, read from their module (not imported: it
    imports the report test's session fixture)."""
    for node in ast.parse(BROWSER_TESTS.read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["CHROMIUM_MISSING"]:
            return ast.literal_eval(node.value)
    raise AssertionError("CHROMIUM_MISSING not found")


_STUBS = {
    "id": '[ "$1" = -u ] && echo "${FAKE_UID:-1000}"',
    "sudo": 'echo "sudo $*" >> "$CALLS"; [ "${FAKE_SUDO:-no}" = yes ] || exit 1; shift; [ "$1" = true ] || exec "$@"',
    "apt-get": 'echo "apt-get $*" >> "$CALLS"; [ "${FAKE_APT:-ok}" = ok ] || exit 100\n'
    'if [ "$1" = install ]; then printf "#!/bin/sh\\n" > "$DEBIAN_CHROMIUM"; /bin/chmod +x "$DEBIAN_CHROMIUM"; fi',
}


def _run(tmp_path: Path, *, apt: bool = True, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str], Path]:
    stubs = tmp_path / "bin"
    stubs.mkdir(parents=True)
    for name, body in _STUBS.items():
        if name == "apt-get" and not apt:
            continue
        (stubs / name).write_text(f"#!/bin/bash\n{body}\n")
        (stubs / name).chmod(0o755)
    (stubs / "env").symlink_to("/usr/bin/env")
    calls, browser = tmp_path / "calls.log", tmp_path / "usr-bin-chromium"
    proc = subprocess.run(
        ["/bin/bash", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": str(stubs), "CALLS": str(calls), "DEBIAN_CHROMIUM": str(browser), "HOME": str(tmp_path), **env},
    )
    assert proc.returncode == 0, proc.stderr  # never fails the set-up
    return proc, calls.read_text().splitlines() if calls.exists() else [], browser


def test_a_browser_found_installs_nothing(tmp_path):
    found = tmp_path / "chrome"
    found.write_text("#!/bin/sh\n")
    found.chmod(0o755)
    proc, calls, _ = _run(tmp_path, HEADLENS_CHROMIUM=str(found), FAKE_UID="0")
    assert calls == [] and proc.stderr == ""


def test_as_root_it_installs_debians_chromium_quietly(tmp_path):
    proc, calls, browser = _run(tmp_path, FAKE_UID="0")
    assert calls == ["apt-get update -qq", "apt-get install -y -qq chromium"]
    assert proc.stderr == "" and browser.is_file()
    again, calls_again, _ = _run(tmp_path / "again", FAKE_UID="0", HEADLENS_CHROMIUM=str(browser))
    assert calls_again == [] and again.stderr == ""  # idempotent: found the second time


def test_with_password_less_sudo_it_installs_through_sudo(tmp_path):
    proc, calls, browser = _run(tmp_path, FAKE_SUDO="yes")
    assert calls == [
        "sudo -n true",
        "sudo -n apt-get update -qq",
        "apt-get update -qq",
        "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium",
        "apt-get install -y -qq chromium",
    ]
    assert proc.stderr == "" and browser.is_file()


@pytest.mark.parametrize(
    ("setting", "why"),
    [
        ({"FAKE_UID": "1000"}, "not root (nor password-less sudo)"),
        ({"FAKE_UID": "0", "FAKE_APT": "fail"}, "could not install chromium with apt-get (offline"),
        ({"FAKE_UID": "0", "apt": False}, "no apt-get to install it"),
    ],
    ids=["not-root", "offline", "no-apt-get"],
)
def test_where_it_cannot_install_it_says_how_as_the_skip_does(tmp_path, setting, why):
    setting = dict(setting)
    proc, calls, browser = _run(tmp_path, apt=setting.pop("apt", True), **setting)
    assert not browser.exists()
    assert all(c.startswith(("sudo -n true", "apt-get")) for c in calls)
    [line] = proc.stderr.splitlines()
    assert why in line and "the browser tests will skip" in line
    how = line.split("the browser tests will skip; ", 1)[1]
    assert how in _skip_reason()  # the same instructions as the tests' skip reason


def test_the_script_looks_where_the_tests_look():
    """scripts/chromium.sh's candidates are chromium_binary's (tests/e2e/test_report_browser.py)."""
    source = BROWSER_TESTS.read_text()
    body = source[source.index("def chromium_binary") :]
    body = body[: body.index("return None")]
    wanted = re.findall(r'os\.environ\.get\("(\w+)"\)|"(/[\w/]+)"|shutil\.which\("([\w-]+)"\)', body)
    script = SCRIPT.read_text()
    looked = script[script.index("found() {") : script.index("return 1")]
    assert len(wanted) == 5
    for env_name, path, name in wanted:
        assert (env_name and f"${{{env_name}:-}}" in looked) or (path and path in script) or (name and f"command -v {name})" in looked)


def test_bootstrap_for_tests_runs_it_and_the_runtime_set_up_does_not():
    text = (REPO_ROOT / "scripts" / "bootstrap.sh").read_text()
    block = text[text.index('if [ "$purpose" = test ]; then') :]
    assert "bash scripts/chromium.sh" in block[: block.index("\nfi")]
    assert text.count("scripts/chromium.sh") == 2  # that call, and the header naming it
    assert "apt-get install" not in (REPO_ROOT / ".ci" / "run").read_text()  # one set-up: CI runs bootstrap's
    assert os.access(SCRIPT, os.X_OK)
