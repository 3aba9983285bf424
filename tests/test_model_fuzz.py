"""A model file is judged the same way every time, before any interpreter sees it (issue 52).

Before: a policy.tflite with a few bytes changed and its sha256 recomputed was run (rc 0), refused (rc 2)
or a UnicodeDecodeError traceback (rc 1) by `evaluate` from run to run, started `serve` 2 of 5 times and
took over in a hot update 4 of 6 times: the interpreter read tensor names and indices from wherever the
corrupt offsets pointed. The whole flatbuffer is now verified first (runtime.flatbuffer_verify)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rl2edge.errors import ManifestError
from rl2edge.runtime import Policy
from rl2edge.runtime.flatbuffer_verify import FlatbufferVerifier, verify_tflite
from testkit.cli import assert_clean_failure, rl2edge
from testkit.model_fuzz import artifact_with_model, judge_corpus


def _bad_tensor_name(model: bytes) -> bytes:
    """`model` with one byte of a tensor's name made invalid UTF-8 (0xFF): what the old code read as a name
    and failed on with a UnicodeDecodeError traceback."""
    v = FlatbufferVerifier(model, "m")
    v.verify()
    start, _, _ = next(
        r for r in v.regions if r[2].startswith("subgraph 0 tensor") and r[2].endswith(" name")
    )
    data = bytearray(model)
    data[start + 4] = 0xFF  # the first character, after the 4-byte length
    return bytes(data)


def test_a_tensor_name_that_is_not_utf8_is_refused_the_same_way_every_time(
    cartpole_all, tmp_path: Path
) -> None:
    src = cartpole_all[1] / "int8"
    art = artifact_with_model(src, tmp_path / "art", _bad_tensor_name((src / "policy.tflite").read_bytes()))
    lines = set()
    for _ in range(3):  # evaluate, through the real main(), three times: one verdict
        proc = rl2edge("evaluate", art, "--episodes", "1")
        assert_clean_failure(proc, "policy.tflite is corrupt", "is not valid UTF-8")
        lines.add(proc.stderr.strip().splitlines()[-1])
    assert len(lines) == 1, lines
    # serve refuses at start, before connecting (nothing listens on the endpoint)
    serve = rl2edge("serve", art, "--endpoint", "opc.tcp://127.0.0.1:9", "--cycles", "1")
    assert_clean_failure(serve, "is not valid UTF-8")
    # a hot update loads the candidate as serve's own loader does (isolate=True): refused the same way
    with pytest.raises(ManifestError, match="is not valid UTF-8"):
        Policy.load(art, isolate=True)


def test_the_verifier_refuses_each_class_of_structural_damage(cartpole_all) -> None:
    model = (cartpole_all[1] / "int8" / "policy.tflite").read_bytes()
    verify_tflite(model, "policy.tflite")  # the real one passes
    v = FlatbufferVerifier(model, "m")
    v.verify()
    assert v.buffer_regions and len(v.regions) > 50  # it walked the tables and saw the weights

    def refused(data: bytes) -> str:
        with pytest.raises(ManifestError) as info:
            verify_tflite(data, "policy.tflite")
        assert "\n" not in str(info.value)
        return str(info.value)

    assert "lies at bytes" in refused(model[: len(model) // 2])
    assert "not a TFLite model" in refused(b"\0\0\0\0XXXX" + model[8:])
    # an operator's opcode_index past the operator codes: the first operator that stores one (0 is the
    # schema's default, left out of the table)
    ops = [r[0] for r in v.regions if r[2].startswith("subgraph 0 operators[") and r[2].endswith("]")]
    pos, fields, _ = next(t for t in (FlatbufferVerifier(model, "m").table(p, "op") for p in ops) if t[1][0])
    data = bytearray(model)
    data[pos + fields[0] : pos + fields[0] + 4] = (10_000).to_bytes(4, "little")
    assert "opcode_index names operator code 10000" in refused(bytes(data))


def test_a_short_corpus_gets_one_verdict_per_file_and_never_a_crash_or_traceback(
    cartpole_all, tmp_path: Path
) -> None:
    """100 seeded corruptions of the int8 MLP, judged 3 times each (the whole corpus, benchmarks/model_fuzz.py,
    is the slow test below)."""
    models = {"mlp": (cartpole_all[1] / "int8" / "policy.tflite", ())}
    results = judge_corpus(models, per_model=100, runs=3, seed=0, work=tmp_path / "corpus")
    outcomes = [r.outcome for r in results]
    assert all(r.stable for r in results), [r.verdicts for r in results if not r.stable][:3]
    assert set(outcomes) <= {"accepted", "refused"}, [
        r.verdicts[0] for r in results if r.outcome not in ("accepted", "refused")
    ]
    assert outcomes.count("refused") >= 40 and outcomes.count("accepted") >= 10  # both verdicts occur
    broken = [r for r in results if r.schema_refuses]
    assert broken and all(r.outcome == "refused" for r in broken)


@pytest.mark.slow  # about 5 minutes: trains and exports four small models, then 2,000 files x 3 runs
def test_the_whole_corpus(tmp_path: Path) -> None:
    from benchmarks.model_fuzz import main

    data = main(
        ["--per-model", "500", "--runs", "3", "--models", str(tmp_path / "models"), "--out", str(tmp_path)]
    )
    total = data["rows"][-1]
    assert total["files"] == 2000 and total["stable"] == 2000 and data["unstable"] == []
    assert total["crashed"] == 0 and total["traceback"] == 0
    assert total["schema_reader_refuses"] == total["of_those_refused"]
