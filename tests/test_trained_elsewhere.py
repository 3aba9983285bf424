"""Policies trained elsewhere: files made by another library's own code, exported with a policy spec
(export/policy_spec.py) on the ONNX route (export/onnx_graph.py) to a verified int8 artifact that
`evaluate` and `serve` take as they take any. The peer: rsl-rl's own PPO and exporter (the files Isaac
Lab's policies are), testkit.rsl_rl_env; nothing of rl2edge takes part in making them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rl2edge.cli.app import main
from testkit.cli import assert_clean_failure, rl2edge

ENV = "Pendulum-v1"
SPEC = """spec: 1
env: Pendulum-v1
observation:
  shape: [3]
  low: [-1.0, -1.0, -8.0]
  high: [1.0, 1.0, 8.0]
  input: obs
normalization: in-graph
action:
  type: box
  low: [-2.0]
  high: [2.0]
  output: actions
  scale: units
"""
STATE = "state:\n  - {input: h_in, output: h_out}\n  - {input: c_in, output: c_out}\n"


def _export(source: Path, spec: Path, out: Path, *extra: str) -> None:
    argv = ["export", str(source), "--spec", str(spec), "--out", str(out), "--no-progress", *extra]
    assert main(argv) == 0


def _manifest(art: Path) -> dict:
    return json.loads((art / "manifest.json").read_text())


def _check_exported(art: Path) -> None:
    """fp32 within 1e-4 of the file in onnxruntime on at least 1,000 held-out observations; int8 keeps the
    closed-loop return by export's own criterion."""
    from rl2edge.export.return_check import check_return
    from rl2edge.export.tolerances import RETURN_DROP_WARNING_PCT

    fp32, int8 = _manifest(art / "fp32")["verification"], _manifest(art / "int8")["verification"]
    assert fp32["heldout"]["samples"] >= 1000
    assert fp32["tflite_vs_source"]["max_abs_error"] <= 1e-4
    if fp32["onnx_vs_source"] is not None:  # the ONNX route's composed file (the TF route has none)
        assert fp32["onnx_vs_source"]["max_abs_error"] <= 1e-4
    loop = int8["closed_loop"]
    assert check_return(loop["fp32"], loop["this_file"], RETURN_DROP_WARNING_PCT).within, loop


@pytest.fixture(scope="module")
def rsl_mlp(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from testkit.rsl_rl_env import train_rsl_rl

    out = tmp_path_factory.mktemp("rsl_mlp")
    onnx_file, _ = train_rsl_rl(ENV, out, 10)
    (out / "spec.yaml").write_text(SPEC)
    return onnx_file, out / "spec.yaml"


@pytest.fixture(scope="module")
def rsl_lstm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from testkit.rsl_rl_env import train_rsl_rl

    out = tmp_path_factory.mktemp("rsl_lstm")
    rnn = {"rnn_type": "lstm", "rnn_hidden_dim": 32, "rnn_num_layers": 1}
    onnx_file, _ = train_rsl_rl(ENV, out, 5, rnn=rnn)
    (out / "spec.yaml").write_text(SPEC + STATE)
    return onnx_file, out / "spec.yaml"


@pytest.fixture(scope="module")
def rsl_gru(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """rsl-rl's GRU: one state pair, h_in/h_out."""
    from testkit.rsl_rl_env import train_rsl_rl

    out = tmp_path_factory.mktemp("rsl_gru")
    rnn = {"rnn_type": "gru", "rnn_hidden_dim": 32, "rnn_num_layers": 1}
    onnx_file, _ = train_rsl_rl(ENV, out, 5, rnn=rnn)
    (out / "spec.yaml").write_text(SPEC + "state:\n  - {input: h_in, output: h_out}\n")
    return onnx_file, out / "spec.yaml"


@pytest.mark.integration
@pytest.mark.parametrize("exporter", ["policy.onnx", "policy_opset11.onnx"])
def test_an_rsl_rl_policy_file_is_verified_to_int8_and_served_as_evaluated(
    rsl_mlp, exporter: str, tmp_path: Path
) -> None:
    """rsl-rl's runner's own file (opset 18) and the same policy as Isaac Lab's exporter writes it (opset 11,
    the TorchScript exporter)."""
    from rl2edge.runtime import Policy
    from rl2edge.train.core.evaluation import evaluate
    from testkit.plc import served_returns

    onnx_file, spec = rsl_mlp
    onnx_file = onnx_file.with_name(exporter)
    _export(onnx_file, spec, tmp_path / "art", "--quantize", "all")
    _check_exported(tmp_path / "art")
    source = _manifest(tmp_path / "art" / "int8")["source"]
    assert source["kind"] == "onnx" and source["spec"]["normalization"] == "in-graph"
    int8 = tmp_path / "art" / "int8"
    assert served_returns(int8, ENV, 2, 5, tmp_path) == evaluate(Policy.load(int8).predict, ENV, 2, 5).returns


@pytest.mark.integration
@pytest.mark.parametrize(("which", "state"), [("rsl_lstm", ["h_in", "c_in"]), ("rsl_gru", ["h_in"])])
def test_a_recurrent_rsl_rl_file_keeps_its_state_on_the_contract(
    which: str, state: list[str], request, tmp_path: Path
) -> None:
    """The LSTM file's h_in/c_in and h_out/c_out (the GRU's h_in/h_out) become the artifact's state, reset
    by episode_start; its LSTM or GRU node is exported as one step of gates (no sequence op: int8 converts),
    and the files equal the file's own cell in onnxruntime over whole episodes; served with plc-sim's
    episode starts, every episode's return is evaluate's."""
    from rl2edge.runtime import Policy
    from rl2edge.train.core.evaluation import evaluate
    from testkit.plc import served_returns
    from testkit.tflite_ops import op_names

    onnx_file, spec = request.getfixturevalue(which)
    onnx_file = onnx_file.with_name("policy_opset11.onnx")  # as Isaac Lab writes a recurrent policy
    _export(onnx_file, spec, tmp_path / "art", "--quantize", "all")
    _check_exported(tmp_path / "art")
    int8 = tmp_path / "art" / "int8"
    manifest = _manifest(int8)
    assert [t["name"] for t in manifest["state"]["tensors"]] == state
    assert not {"UNIDIRECTIONAL_SEQUENCE_LSTM", "WHILE"} & set(op_names(int8 / "policy.tflite"))
    policy = Policy.load(int8)
    expected = evaluate(policy.predict, ENV, 3, 7, on_reset=policy.reset).returns
    assert served_returns(int8, ENV, 3, 7, tmp_path, episode_start=True) == expected


@pytest.mark.integration
def test_recorded_observations_alone_calibrate_and_verify(
    rsl_mlp, tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """No simulator: a CSV of recorded plant observations calibrates int8 and is the held-out parity set;
    the manifest and the report say that no closed-loop check ran. Two rows are no plant state (a PLC's
    'no reading' sentinel 1e30, an omega past the declared 8 rad/s): one such row had taken int8's agreement
    to 56 % with exit 0; they are dropped with one warning that names them."""
    from testkit.observations import random_observations

    onnx_file, _ = rsl_mlp
    no_env = tmp_path / "spec.yaml"
    no_env.write_text(SPEC.replace("env: Pendulum-v1\n", ""))
    log = tmp_path / "plant_log.csv"
    rows = random_observations(ENV, 602, seed=3).astype(np.float64)
    rows[40, 2], rows[41, 2] = 1e30, 9.5
    np.savetxt(log, rows, delimiter=",", header="cos,sin,omega", comments="")
    _export(onnx_file, no_env, tmp_path / "art", "--quantize", "int8", "--observations", str(log))
    m = _manifest(tmp_path / "art")
    assert m["verification"]["closed_loop"]["checked"] is False
    assert m["quantization"]["calibration"]["calibration"]["samples"] == 400
    assert m["verification"]["tflite_vs_source"]["samples"] == 200
    assert "no closed-loop check was possible" in capfd.readouterr().out
    assert (
        "2 of 602 rows are outside the spec's declared bounds or a sentinel (row 41, column 3 is 1e+30, a 'no "
        "reading' sentinel such as FLT_MAX or 1e30, outside the declared [-8, 8]); they are dropped"
        in caplog.text
    ), caplog.text


@pytest.mark.integration
@pytest.mark.parametrize("which", ["rsl_mlp", "rsl_lstm", "rsl_gru"])
def test_an_rsl_rl_checkpoint_gives_the_policy_its_own_exporter_writes(
    which: str, request, tmp_path: Path
) -> None:
    """The checkpoint (model_<it>.pt), rebuilt from its state_dict with its normalizer: its fp32 file acts as
    rsl-rl's own policy.onnx does (onnxruntime, clipped to the bounds as the spec's units are), within 1e-4,
    over whole episodes with the state carried and reset."""
    import onnxruntime as ort

    from rl2edge.runtime import Policy
    from testkit.observations import random_observations

    onnx_file, spec = request.getfixturevalue(which)
    _export(onnx_file.with_name("model.pt"), spec, tmp_path / "art", "--quantize", "fp32")
    assert _manifest(tmp_path / "art")["source"]["kind"] == "rsl-rl-checkpoint"
    policy, session = Policy.load(tmp_path / "art"), ort.InferenceSession(str(onnx_file))
    state_inputs = [i for i in session.get_inputs() if i.name != "obs"]  # h_in, c_in: fed h_out, c_out
    worst = 0.0
    for t, obs in enumerate(random_observations(ENV, 400, seed=4)):
        if t % 200 == 0:  # an episode's start: both reset
            policy.reset()
            state = [np.zeros(i.shape, np.float32) for i in state_inputs]
        feeds = {
            "obs": obs[None].astype(np.float32),
            **{i.name: v for i, v in zip(state_inputs, state, strict=True)},
        }
        action, *state = session.run(None, feeds)
        expected = np.clip(action[0], -2.0, 2.0)
        worst = max(worst, float(np.abs(np.asarray(policy.predict(obs)) - expected).max()))
    assert worst <= 1e-4, worst


@pytest.mark.integration
def test_a_cleanrl_style_agent_exports_through_the_python_api(tmp_path: Path) -> None:
    """CleanRL keeps NormalizeObservation's statistics out of the weights; given in the spec, they are
    folded, the fp32 file matches the actor on raw observations, and int8 is served as evaluated."""
    from rl2edge.export.api import export_policy
    from rl2edge.runtime import Policy
    from rl2edge.train.core.evaluation import evaluate
    from testkit.cleanrl_style import train
    from testkit.plc import served_returns

    agent, mean, var = train(ENV, 3)
    spec = {
        "spec": 1, "env": ENV, "observation": {"shape": [3], "low": [-1.0, -1.0, -8.0], "high": [1.0, 1.0, 8.0]},
        "normalization": {"mean": mean.tolist(), "var": var.tolist(), "layout": "gymnasium", "clip": 10},
        "action": {"type": "box", "low": [-2.0], "high": [2.0], "scale": "units"},
    }  # fmt: skip
    export_policy(agent.actor_mean, spec, tmp_path / "art", quantize="all", progress=False)
    _check_exported(tmp_path / "art")
    import torch

    fp32 = Policy.load(tmp_path / "art" / "fp32")
    raw = np.asarray([[0.5, -0.8, 3.0], [-1.0, 0.0, -7.5]], np.float32)
    with torch.no_grad():  # CleanRL's own inference: its wrapper's normalization and clip, then the actor
        expected = agent.actor_mean(
            torch.as_tensor(np.clip((raw - mean) / np.sqrt(var + 1e-8), -10, 10)).float()
        )
    np.testing.assert_allclose([fp32.predict(r) for r in raw], expected.numpy().clip(-2, 2), atol=1e-4)
    int8 = tmp_path / "art" / "int8"
    assert served_returns(int8, ENV, 2, 9, tmp_path) == evaluate(Policy.load(int8).predict, ENV, 2, 9).returns


@pytest.mark.integration
def test_a_keras_policy_saved_as_a_savedmodel_exports_and_serves(tmp_path: Path) -> None:
    """A Keras model fitted by Keras (to a damping controller), saved by `model.export`: its variables are
    frozen into the graph, so the files compute the fitted weights, not zeros."""
    import keras

    from rl2edge.runtime import Policy
    from rl2edge.train.core.evaluation import evaluate
    from testkit.observations import random_observations
    from testkit.plc import served_returns

    keras.utils.set_random_seed(0)
    obs = random_observations(ENV, 2000, seed=1).astype(np.float32)
    target = np.clip(-0.25 * obs[:, 2:3] - 0.5 * obs[:, 1:2], -1, 1)
    model = keras.Sequential(
        [keras.Input((3,), name="obs"), keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(1)]
    )
    model.compile("adam", "mse")
    model.fit(obs, target, epochs=20, batch_size=64, verbose=0)
    model.export(str(tmp_path / "saved"), verbose=False)
    (tmp_path / "spec.yaml").write_text(
        SPEC.replace("normalization: in-graph", "normalization: none")
        .replace("scale: units", "scale: unit-range\n  squash: clip").replace("output: actions", "output: output_0")
    )  # fmt: skip
    _export(tmp_path / "saved", tmp_path / "spec.yaml", tmp_path / "art", "--quantize", "all")
    _check_exported(tmp_path / "art")
    fp32 = Policy.load(tmp_path / "art" / "fp32")
    expected = 2.0 * np.clip(model.predict(obs[:50], verbose=0), -1, 1)
    np.testing.assert_allclose([fp32.predict(o) for o in obs[:50]], expected, atol=1e-4)
    int8 = tmp_path / "art" / "int8"
    assert served_returns(int8, ENV, 2, 3, tmp_path) == evaluate(Policy.load(int8).predict, ENV, 2, 3).returns


@pytest.mark.integration
def test_a_torchscript_file_exports(tmp_path: Path) -> None:
    import torch

    from testkit.cleanrl_style import Agent

    torch.manual_seed(0)
    torch.jit.script(Agent(3, 1).actor_mean).save(str(tmp_path / "policy.pt"))
    (tmp_path / "spec.yaml").write_text(SPEC.replace("normalization: in-graph", "normalization: none"))
    _export(tmp_path / "policy.pt", tmp_path / "spec.yaml", tmp_path / "art", "--quantize", "fp32")
    m = _manifest(tmp_path / "art")
    assert (
        m["source"]["kind"] == "torchscript"
        and m["verification"]["tflite_vs_source"]["max_abs_error"] <= 1e-4
    )


@pytest.mark.integration
def test_the_export_page_walks_through_a_policy_trained_elsewhere(tmp_path: Path) -> None:
    """docs/export.md's "Policies trained elsewhere" blocks, as written: rsl-rl's files, the spec, the
    ONNX file and the checkpoint to int8, evaluate, and recorded observations without an env."""
    from testkit.doc_blocks import ROOT, run_walk_through

    run_walk_through(ROOT / "docs/export.md", "tests/test_trained_elsewhere.py", tmp_path, {}, 4)
    robot = tmp_path / "robot"
    for art in ("robot", "robot-checkpoint", "plant"):
        assert _manifest(robot / "artifacts" / art)["quantization"]["mode"] == "int8"
    assert _manifest(robot / "artifacts/plant")["verification"]["closed_loop"]["checked"] is False
    assert _manifest(robot / "artifacts/robot-checkpoint")["source"]["kind"] == "rsl-rl-checkpoint"


@pytest.mark.integration
def test_discrete_logits_and_a_dict_of_inputs(tmp_path: Path) -> None:
    """A file of logits on CartPole: argmax, evaluate equals the file's own argmax; a file with one input per
    Dict key (named otherwise than the keys): the artifact takes the keys, and each reaches its input."""
    import onnxruntime as ort

    from rl2edge.runtime import Policy
    from testkit.observations import random_observations
    from testkit.onnx_models import keyed_policy, linear_policy

    logits = linear_policy(tmp_path / "logits.onnx", obs=4, act=2)
    (tmp_path / "cart.yaml").write_text(
        "spec: 1\nenv: CartPole-v1\nobservation: {shape: [4], input: obs}\nnormalization: none\n"
        "action: {type: discrete, n: 2, output: actions}\n"
    )
    _export(logits, tmp_path / "cart.yaml", tmp_path / "cart", "--quantize", "fp32")
    session, policy = ort.InferenceSession(str(logits)), Policy.load(tmp_path / "cart")
    for obs in random_observations("CartPole-v1", 50, seed=2):
        assert policy.predict(obs) == int(
            session.run(None, {"obs": obs[None].astype(np.float32)})[0].argmax()
        )

    env = "testkit.dict_envs:DictPendulum"  # keys rate [1] then angle [2]
    keyed = keyed_policy(tmp_path / "keyed.onnx", {"rate": 1, "angle": 2}, 1)
    (tmp_path / "keyed.yaml").write_text(
        f"spec: 1\nenv: {env}\nobservation:\n  keys:\n"
        "    - {name: rate, shape: [1], low: -8.0, high: 8.0, input: rate_in}\n"
        "    - {name: angle, shape: [2], low: -1.0, high: 1.0, input: angle_in}\n"
        "normalization: none\naction: {type: box, low: [-2.0], high: [2.0], output: actions}\n"
    )
    _export(keyed, tmp_path / "keyed.yaml", tmp_path / "keyed", "--quantize", "fp32")
    m = _manifest(tmp_path / "keyed")
    assert [k["name"] for k in m["model"]["input"]["keys"]] == ["rate", "angle"]
    session, policy = ort.InferenceSession(str(keyed)), Policy.load(tmp_path / "keyed")
    obs = {"rate": np.array([1.5], np.float32), "angle": np.array([0.6, -0.8], np.float32)}
    expected = session.run(None, {"rate_in": obs["rate"][None], "angle_in": obs["angle"][None]})[0][0]
    np.testing.assert_allclose(policy.predict(obs), np.clip(expected, -2, 2), atol=1e-5)


# ------------------------------------------------------------------------------------------------ bad input
@pytest.fixture()
def linear(tmp_path: Path) -> tuple[Path, Path]:
    from testkit.onnx_models import linear_policy

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("normalization: in-graph", "normalization: none"))
    return linear_policy(tmp_path / "policy.onnx"), spec


def _refused(tmp_path: Path, *args: str | Path, fragments: tuple[str, ...]) -> None:
    out = tmp_path / "art"
    assert_clean_failure(rl2edge("export", *args, "--out", out, "--no-progress"), *fragments)
    assert not out.exists()


def test_a_spec_that_does_not_fit_the_file_is_one_line(linear, tmp_path: Path) -> None:
    onnx_file, spec = linear
    spec.write_text(spec.read_text().replace("input: obs", "input: observation"))
    _refused(
        tmp_path, onnx_file, "--spec", spec, fragments=("the spec names input 'observation'", "does not have")
    )
    spec.write_text(
        "spec: 1\nobservation: {shape: [4], input: obs}\nnormalization: none\n"
        "action: {type: box, low: [-2.0], high: [2.0], output: actions}\n"
    )
    _refused(tmp_path, onnx_file, "--spec", spec, fragments=("input 'obs' takes 3 values", "gives it 4"))


@pytest.mark.parametrize(
    ("weights", "fragment"),
    [
        (
            float("nan"),
            "logits/Q-values are not finite on",
        ),  # argmax 0 everywhere: it had verified, agree 100 %
        (0.0, "logits/Q-values are the same on all"),
    ],
)
def test_a_policy_with_nan_or_constant_outputs_is_refused(
    tmp_path: Path, weights: float, fragment: str
) -> None:
    from testkit.onnx_models import linear_policy

    onnx_file = linear_policy(tmp_path / "policy.onnx", obs=4, act=2, weights=weights)
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "spec: 1\nenv: CartPole-v1\nobservation: {shape: [4], input: obs}\nnormalization: none\n"
        "action: {type: discrete, n: 2, output: actions}\n"
    )
    _refused(
        tmp_path, onnx_file, "--spec", spec, "--quantize", "fp32", fragments=(fragment, "nothing was written")
    )
    if weights == 0.0:  # asked for: a constant test policy exports
        out = tmp_path / "asked"
        proc = rl2edge("export", onnx_file, "--spec", spec, "--quantize", "fp32", "--allow-constant-output",
                       "--out", out, "--no-progress")  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert (out / "policy.tflite").is_file()


def test_a_clip_that_is_not_positive_is_one_line(linear, tmp_path: Path) -> None:
    onnx_file, spec = linear
    for clip, fragment in (("-1", "got -1"), ("0", "got 0"), (".nan", "got nan"), ("ten", "got 'ten'")):
        norm = f"normalization: {{mean: [0, 0, 0], var: [1, 1, 1], clip: {clip}}}"
        spec.write_text(SPEC.replace("normalization: in-graph", norm))
        _refused(
            tmp_path,
            onnx_file,
            "--spec",
            spec,
            fragments=("normalization.clip must be a finite number above 0", fragment),
        )


@pytest.mark.parametrize(
    ("attack", "fragment"),
    [
        ("none", ""),  # the regular file: exported, its sha256 on record
        ("symlink", "its external data location 'policy.onnx.data' is a symbolic link"),
        ("fifo", "is not a regular file (a device or a FIFO)"),
        ("folder", "is a folder"),
        ("missing", "does not exist beside the model"),
        ("absolute", "its external data location '/etc/passwd' must name a file inside the model's folder"),
        ("parent", "its external data location '../x.data' must name a file inside the model's folder"),
    ],
)
def test_external_data_is_read_only_from_regular_files_inside_the_model_folder(
    linear, tmp_path: Path, attack: str, fragment: str
) -> None:
    """A model folder from outside is a closed box: its external data (`policy.onnx.data`) had been followed
    through a symlink to /etc/passwd and copied into policy.onnx and policy.tflite, with exit 0; a FIFO or
    /dev/zero hung the export."""
    import os

    from rl2edge.fileio import sha256_file
    from testkit.onnx_models import point_external_data_at, with_external_data

    onnx_file, spec = linear
    data = with_external_data(onnx_file, "policy.onnx.data")
    secret = tmp_path / "outside" / "secret"
    secret.parent.mkdir()
    secret.write_bytes(data.read_bytes())  # a file the same size, outside the model's folder
    if attack == "symlink":
        data.unlink()
        data.symlink_to(secret)
    elif attack == "fifo":
        data.unlink()
        os.mkfifo(data)
    elif attack == "folder":
        data.unlink()
        data.mkdir()
    elif attack == "missing":
        data.unlink()
    elif attack == "none":
        _export(onnx_file, spec, tmp_path / "art", "--quantize", "fp32")
        assert _manifest(tmp_path / "art")["source"]["external_data"] == {
            "policy.onnx.data": sha256_file(data)
        }
        return
    else:
        point_external_data_at(onnx_file, "/etc/passwd" if attack == "absolute" else "../x.data")
    _refused(tmp_path, onnx_file, "--spec", spec, "--quantize", "fp32", fragments=(fragment,))


def test_a_policy_that_does_not_fit_its_env_is_one_line_at_export_and_at_evaluate(
    linear, tmp_path: Path, cartpole_all
) -> None:
    """A Box spec on CartPole (Discrete(2)) had gone on to a 37-line gymnasium traceback at calibration's
    first env.step; an artifact evaluated in another env the same at evaluate."""
    onnx_file, spec = linear
    box_on_cartpole = spec.read_text().replace("env: Pendulum-v1", "env: CartPole-v1")
    spec.write_text(box_on_cartpole)
    _refused(tmp_path, onnx_file, "--spec", spec, fragments=(
        "the policy's action is a Box of shape [1], and CartPole-v1 takes a Discrete(2)", "correct the policy spec"))  # fmt: skip
    _refused(tmp_path, onnx_file, "--spec", spec, "--env", "MountainCarContinuous-v0", fragments=(
        "the policy observes 3 values, and MountainCarContinuous-v0 gives 2 (shape [2])",))  # fmt: skip
    art = cartpole_all[1] / "fp32"
    assert_clean_failure(
        rl2edge("evaluate", art, "--env", "Pendulum-v1", "--episodes", "1"),
        "the policy's action is a Discrete(2), and Pendulum-v1 takes a Box of shape [1]",
        "its manifest's source.env_id",
    )


def test_the_python_api_tells_torch_from_tensorflow_by_type_and_names_the_module_to_pass() -> None:
    """A module defined in the user's own script (module __main__) was labelled "(tensorflow)", and CleanRL's
    whole Agent (no forward) was refused with a TensorFlow message."""
    import torch
    from torch import nn

    from rl2edge.errors import ConfigError
    from rl2edge.export.api import _spec, policy_source
    from testkit.cleanrl_style import Agent

    spec = _spec(
        {
            "spec": 1,
            "env": ENV,
            "observation": {"shape": [3]},
            "normalization": "none",
            "action": {"type": "box", "low": [-2.0], "high": [2.0], "scale": "units"},
        }
    )
    with pytest.raises(
        ConfigError, match=r"Agent is a torch module without forward\(\): pass .* agent.actor_mean"
    ):
        policy_source(Agent(3, 1), spec)

    class Mine(nn.Module):  # as written in a user's script
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.tanh(x[:, :1])

    Mine.__module__ = "__main__"
    assert policy_source(Mine(), spec).reference_name == "Mine (torch)"


def test_a_declared_shape_is_bounded_before_anything_is_allocated(linear, tmp_path: Path) -> None:
    """A declared [60000000] had taken 30 s and 1.9 GB before its refusal (MemoryError on larger ones): the
    spec is refused as it is read, before any array of that size exists."""
    onnx_file, spec = linear
    for shape, fragment in (("[60000000]", "holds 60000000 values; a policy observes at most 1048576"),
                            ("[1, 1, 1, 1, 1, 1, 1, 1, 1]", "at most 8 positive sizes")):  # fmt: skip
        spec.write_text(SPEC.replace("shape: [3]", f"shape: {shape}"))
        _refused(tmp_path, onnx_file, "--spec", spec, fragments=(fragment,))


def test_a_dynamic_dimension_other_than_the_batch_is_one_line(tmp_path: Path) -> None:
    from testkit.onnx_models import linear_policy

    onnx_file = linear_policy(tmp_path / "policy.onnx", obs_dims=["batch", "n"])
    (tmp_path / "spec.yaml").write_text(SPEC.replace("normalization: in-graph", "normalization: none"))
    _refused(
        tmp_path,
        onnx_file,
        "--spec",
        tmp_path / "spec.yaml",
        fragments=("dynamic dimension other than the batch",),
    )


def test_an_op_the_converter_cannot_take_is_named(tmp_path: Path) -> None:
    from testkit.onnx_models import linear_policy

    onnx_file = linear_policy(tmp_path / "policy.onnx", scaler=True)
    (tmp_path / "spec.yaml").write_text(SPEC.replace("normalization: in-graph", "normalization: none"))
    _refused(
        tmp_path, onnx_file, "--spec", tmp_path / "spec.yaml", "--quantize", "fp32",
        fragments=("no conversion for the model's op Scaler", "onnx2tf.ops.Scaler"),
    )  # fmt: skip


def test_a_variance_that_is_not_positive_is_one_line(linear, tmp_path: Path) -> None:
    onnx_file, spec = linear
    spec.write_text(
        SPEC.replace("normalization: in-graph", "normalization: {mean: [0, 0, 0], var: [1, 0, 1]}")
    )
    _refused(tmp_path, onnx_file, "--spec", spec, fragments=("element 1 has variance 0.0", "above 0"))
    np.savez(tmp_path / "stats.npz", mean=np.zeros(3), var=np.array([1.0, -2.0, 1.0]))
    spec.write_text(
        SPEC.replace("normalization: in-graph", "normalization: {file: stats.npz, layout: rsl-rl}")
    )
    _refused(tmp_path, onnx_file, "--spec", spec, fragments=("from stats.npz: element 1 has variance -2.0",))


@pytest.mark.parametrize(
    ("rows", "suffix", "fragment"),
    [
        ("nan", ".csv", "row 7, column 2 is nan"),
        ("inf", ".npz", "row 7, column 2 is inf"),
        ("wide", ".csv", "has 4 columns; the policy's observation has 3"),
        ("wide", ".npz", "has 4 columns; the policy's observation has 3"),
    ],
)
def test_bad_recorded_observations_are_one_line(
    linear, tmp_path: Path, rows: str, suffix: str, fragment: str
) -> None:
    onnx_file, spec = linear
    data = np.ones((60, 4 if rows == "wide" else 3))
    if rows != "wide":
        data[6, 1] = np.nan if rows == "nan" else np.inf
    path = tmp_path / f"log{suffix}"
    if suffix == ".csv":
        np.savetxt(path, data, delimiter=",")
    else:
        np.savez(path, observations=data)
    _refused(tmp_path, onnx_file, "--spec", spec, "--observations", path, fragments=(fragment,))


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("complex", "array 'observations' holds complex128 values; observations are real numbers"),
        ("empty", "array 'observations' holds no rows"),
        ("beyond float32", "row 7, column 2 is 3.5e+38, outside float32"),
        ("all FLT_MAX", "has 0 rows; give at least 30"),
        ("binary csv", "is not a text CSV (byte 128 is not UTF-8)"),
    ],
)
def test_recorded_observations_that_are_not_plant_data_are_one_line(
    linear, tmp_path: Path, content: str, fragment: str
) -> None:
    """What PLC logs hold besides readings: sentinels (FLT_MAX for 'no reading'), complex values (an FFT's
    output), an empty export, a binary file named .csv."""
    onnx_file, spec = linear
    data = np.full((60, 3), 0.5)
    path = tmp_path / "log.npz"
    if content == "complex":
        np.savez(path, observations=data + 1j)
    elif content == "empty":
        np.savez(path, observations=np.zeros((0, 3)))
    elif content == "beyond float32":
        data[6, 1] = 3.5e38
        np.savez(path, observations=data)
    elif content == "all FLT_MAX":
        np.savez(path, observations=np.full((60, 3), np.finfo(np.float32).max))
    else:
        path = tmp_path / "log.csv"
        path.write_bytes(bytes(range(256)) * 4)
    _refused(tmp_path, onnx_file, "--spec", spec, "--observations", path, fragments=(fragment,))


def test_state_outputs_that_do_not_match_their_inputs_are_one_line(tmp_path: Path) -> None:
    from testkit.onnx_models import linear_policy

    onnx_file = linear_policy(tmp_path / "policy.onnx", state=4, state_out=3)
    (tmp_path / "spec.yaml").write_text(
        SPEC.replace("normalization: in-graph", "normalization: none")
        + "state:\n  - {input: h_in, output: h_out}\n"
    )
    _refused(
        tmp_path, onnx_file, "--spec", tmp_path / "spec.yaml",
        fragments=("state output 'h_out' [1, 3] does not match its input 'h_in' [1, 4]",),
    )  # fmt: skip


def test_a_file_without_a_spec_says_what_to_give(linear, tmp_path: Path) -> None:
    onnx_file, _ = linear
    _refused(tmp_path, onnx_file, fragments=("needs --spec SPEC.yaml",))
