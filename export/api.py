"""Export a policy held in Python: a torch `nn.Module` (CleanRL-style code, which saves a state_dict and
keeps its `NormalizeObservation` statistics apart) or a Keras model / `tf.Module`, with a policy spec
(a path, or the mapping the YAML file holds), through the same pipeline as `rl2edge export`:

    from rl2edge.export.api import export_policy

    report = export_policy(agent.actor_mean, {"spec": 1, "env": "Pendulum-v1", ...}, "artifacts/pd",
                           quantize="int8")
    report.table()  # the summary table `rl2edge export` shows; report.to_json() for the figures

The module maps the observation (normalized by the spec's statistics, or raw) to what the spec's action
says; for a stateful policy export a file whose state is explicit (ONNX).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rl2edge.errors import ConfigError
from rl2edge.export.pipeline import ExportOptions, export_source
from rl2edge.export.policy_spec import PolicySpec, load_policy_spec, policy_spec_from_dict
from rl2edge.export.report import ExportReport
from rl2edge.export.source import ExportSource


def export_policy(
    policy: Any,
    spec: str | Path | dict[str, Any] | PolicySpec,
    out: str | Path,
    *,
    env: str | None = None,
    observations: str | Path | None = None,
    **options: Any,
) -> ExportReport:
    """Export `policy` as `spec` describes it to the artifact `out`; `options` are ExportOptions' (quantize,
    calib_episodes, eval_episodes, seed, force, ...). `env` overrides the spec's; `observations`: recorded
    plant observations, for an export without an env."""
    source = policy_source(policy, _spec(spec), env)
    opts = ExportOptions(observations=Path(observations) if observations else None, **options)
    return export_source(source, Path(out), opts)


def policy_source(policy: Any, spec: PolicySpec, env: str | None = None) -> ExportSource:
    """The export source of a Python policy object: torch's route for an nn.Module, TF's for the rest."""
    env_id = env or spec.env_id
    # by the object's type, not its module: a class defined in the user's script is in __main__
    is_torch = _is_torch_module(policy)
    description: dict[str, Any] = {
        "kind": "python",
        "class": f"{type(policy).__module__}.{type(policy).__qualname__}",
        "spec": spec.to_json(),
        "env_id": env_id,
    }
    if is_torch:
        from torch import nn

        if type(policy).forward is nn.Module.forward:  # CleanRL's whole Agent: its methods, no forward
            raise ConfigError(
                f"{type(policy).__qualname__} is a torch module without forward(): pass the module that maps an "
                "observation to the action (CleanRL: agent.actor_mean for a Box action, agent.actor for "
                "Discrete logits), or give the class a forward"
            )
        from rl2edge.export.sources.torch_module import module_source

        return module_source(policy, spec, description, f"{type(policy).__name__} (torch)", env_id)
    name = f"{type(policy).__name__} (tensorflow)"
    if hasattr(policy, "trainable_variables"):  # a Keras model or a tf.Module
        import tensorflow as tf

        from rl2edge.export.sources.saved_model import saved_model_source

        input_name = spec.inputs[0]
        signature = [tf.TensorSpec([None, spec.observation.size], tf.float32, name=input_name)]
        fn = tf.function(lambda x: {"action": policy(x)}, input_signature=signature).get_concrete_function()
        if spec.action.output not in (None, "action"):
            raise ConfigError(
                "a Python policy's output is called `action`; leave action.output out of the spec"
            )
        return saved_model_source(fn, spec, description, name, env_id)
    raise ConfigError(
        f"export_policy takes a torch nn.Module or a Keras model / tf.Module; got {type(policy).__qualname__}"
    )


def _is_torch_module(policy: Any) -> bool:
    try:
        from torch import nn
    except ImportError:
        return False
    return isinstance(policy, nn.Module)


def _spec(spec: str | Path | dict[str, Any] | PolicySpec) -> PolicySpec:
    if isinstance(spec, PolicySpec):
        return spec
    if isinstance(spec, dict):
        return policy_spec_from_dict(spec, Path("<policy spec>"), base=Path.cwd())
    return load_policy_spec(Path(spec))
