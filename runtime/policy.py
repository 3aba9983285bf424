"""The guarded policy: validate the observation, (de)quantize where the model has integer I/O, invoke,
clamp the action to its declared bounds. Everything else (normalization, the action transform, noise)
is inside the graph."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rl2edge.errors import BackendError, ManifestError, ObservationError
from rl2edge.runtime.interpreters import Backend, open_backend
from rl2edge.runtime.manifest import Manifest, load_manifest
from rl2edge.runtime.model_check import check_tflite_structure, probe_in_child
from rl2edge.runtime.state import PolicyState


class Policy:
    def __init__(
        self,
        manifest: Manifest,
        backend: Backend,
        explore: bool = True,
        noise_seed: int | None = None,
    ):
        """Artifacts with folded noise: the runtime feeds the graph's `noise` input with standard-normal
        draws from a generator seeded with `noise_seed` (default: the manifest's), or zeros when `explore`
        is off (the graph then computes the deterministic action exactly), and feeds OU's state back."""
        self.manifest = manifest
        self._backend = backend
        self.observation_spec = obs = manifest.observation
        self.action_spec = act = manifest.action
        self.obs_shape = obs.shape
        # A Dict observation: each key's slice of the vector the model is fed (predict on a mapping fills
        # a fresh vector key by key, cheaper than a generic flatten: benchmarks/micro_costs.py)
        self._key_parts = [(name, part) for name, part in obs.key_slices]
        self._key_shapes = [(k.name, k.shape if k.is_image else (k.size,)) for k in obs.keys]
        self._model_shape = backend.input_shape
        # a matrix observation is also taken flat, row-major, as a PLC array holds it
        self._shapes = {obs.shape, (1, *obs.shape)} | (
            {(obs.size,), (1, obs.size)} if obs.is_matrix else set()
        )
        if int(np.prod(self._model_shape)) != obs.size:
            raise ManifestError(
                f"model input {self._model_shape} does not hold the manifest's observation {self.obs_shape}"
            )
        for k, (name, size) in zip(obs.keys, backend.key_sizes, strict=False):
            if size != k.size:  # the total can agree while keys do not: a key's values would shift
                raise ManifestError(
                    f"model input {name!r} takes {size} values; the manifest's key {k.name!r} has {k.size} "
                    f"(shape {list(k.shape)}). Was the manifest edited, or does it belong to another model?"
                )
        self.discrete = act.discrete
        self.categorical = act.categorical
        """Integer actions: one Discrete index, or one index per component (MultiDiscrete/MultiBinary)."""
        if self.discrete:
            self._lo, self._hi = act.index_range
        elif act.multi_discrete:  # a vector, as a Box's, of integers within each component's indices
            self._index_lo, self._index_hi = act.index_bounds
            self.action_low = self._index_lo.astype(np.float32)
            self.action_high = self._index_hi.astype(np.float32)
        else:
            self.action_low = np.asarray(act.low, np.float32)
            self.action_high = np.asarray(act.high, np.float32)
        self._in_quant = backend.input_quant
        self._out_quant = backend.output_quant
        if self._in_quant is not None:
            info = np.iinfo(backend.input_dtype)
            self._in_inv_scale = np.float32(1.0 / self._in_quant[0])
            self._in_zp, self._in_lo, self._in_hi = np.float32(self._in_quant[1]), info.min, info.max
        # uint8 frames into a model whose input quantization maps 0..255 onto its integers one to one
        # (scale 1: int8 with zero point -128, or uint8 with 0): the quantized frame is the frame itself,
        # shifted, with no float round trip and nothing to check (every uint8 value is finite and in range).
        self._u8_shift: int | None = None
        if self._in_quant is not None and self._in_quant[0] == 1.0:
            if backend.input_dtype == np.int8 and self._in_quant[1] == -128:
                self._u8_shift = 0x80  # x - 128 as int8 is x XOR 0x80 viewed as int8
            elif backend.input_dtype == np.uint8 and self._in_quant[1] == 0:
                self._u8_shift = 0
        # Float files of uint8 observations take uint8 and cast inside the graph (export's
        # uint8_input_saved_model): uint8 frames pass as they are.
        self._uint8_model = self._in_quant is None and backend.input_dtype == np.uint8
        # the shifted frame of each call, written in place (the interpreter copies it in on set_tensor)
        self._u8_buffer = np.empty(self._model_shape, np.uint8) if self._u8_shift else None
        # Image observations: the env gives e.g. HWC, torch/ONNX models take NCHW, TFLite models NHWC.
        self._axes = _transpose_axes(obs.layout, _model_layout(manifest, backend))
        self.noise: dict | None = (manifest.data.get("folded") or {}).get("noise")
        # OU's state tensor (the noise section names it), looked up once: predict reads it every call
        self._ou: str | None = (self.noise or {}).get("graph", {}).get("state")
        if self.noise is not None:
            io = self.noise["graph"]
            if io.get("state_input"):
                raise ManifestError(
                    "this artifact's OU noise keeps its state outside the artifact's state contract (exported "
                    "by an rl2edge before OU's state became an `episode_start`-reset state tensor); export it "
                    "again from its checkpoint with the same --noise"
                )
            missing = [n for n in io["inputs"] if n not in backend.extra_inputs]
            missing += [n for n in io["outputs"] if n not in backend.extra_outputs]
            if missing:
                raise ManifestError(
                    f"the manifest's noise names tensors {missing} that the model does not have"
                )
            self._noise_shape = (1, int(self.noise["dim"]))
            self.explore = explore
            self._noise_seed = int(self.noise["seed"] if noise_seed is None else noise_seed)
        # State the graph carries from one call to the next (runtime.state: a recurrent policy's h and c,
        # OU's process): fed as inputs, its next value read back from the outputs, reset inside the graph by
        # episode_start.
        self.states = PolicyState.from_manifest(manifest.data.get("state"), backend)
        self.reset_noise()
        explained = set(self.states.inputs)
        if self.noise is not None:
            explained.update(self.noise["graph"]["inputs"])
        unexplained = sorted(set(backend.extra_inputs) - explained)
        if unexplained:
            raise ManifestError(f"the model takes inputs {unexplained} that the manifest does not explain")

    def reset_noise(self, seed: int | None = None) -> None:
        """Restart the noise: a fresh generator (the same seed unless given) and OU's state at zero."""
        if self.noise is None:
            return
        if seed is not None:
            self._noise_seed = int(seed)
        self._rng = np.random.default_rng(self._noise_seed)
        if self._ou:
            self.states.reset()

    def reset(self) -> None:
        """A new episode: the graph's state back to its initial value (OU's process too), and the next call
        flagged as an episode start (the graph resets it there too: what export verified). The noise
        generator runs on across episodes; `reset_noise` restarts it. A stateless policy: nothing to do."""
        self.states.reset()

    def state(self) -> dict[str, np.ndarray]:
        """A copy of the state the next call feeds the graph, by name (monitoring, tests); {} if none."""
        return self.states.snapshot()

    @property
    def noise_state(self) -> np.ndarray | None:
        """OU's current state (what the next call feeds the graph), or None."""
        return self.states.snapshot()[self._ou] if self._ou else None

    def _feeds(self) -> dict[str, np.ndarray]:
        assert self.noise is not None  # called only for an artifact with folded noise
        io = self.noise["graph"]
        eps = (
            self._rng.standard_normal(self._noise_shape, dtype=np.float32)
            if self.explore
            else np.zeros(self._noise_shape, np.float32)
        )
        return {io["noise_input"]: eps}

    @classmethod
    def load(
        cls,
        artifact_dir: str | Path,
        backend: str = "auto",
        num_threads: int = 1,
        model: str | None = None,
        explore: bool = True,
        noise_seed: int | None = None,
        probe: bool = True,
        isolate: bool = False,
        call_timeout_s: float = 1.0,
    ) -> Policy:
        """Load an artifact (hashes checked). `model` picks a file other than the manifest's (e.g. policy.onnx).

        `isolate`: run the model in its own process (runtime.model_process), as `serve` does: a model that
        crashes or hangs costs that process (a BackendError per call until it is restarted), never this
        one; a call waits at most `call_timeout_s`. The child loads and runs the model once before this
        returns, every time: each load is checked afresh.
        `probe` (in-process only): check the model file's structure and load and run it once in a child
        process first (runtime.model_check), so that a corrupt model is refused with one line instead of
        crashing this process; once per model file and process (evaluate and the benchmarks load the same
        file many times)."""
        manifest = load_manifest(artifact_dir)
        keys = tuple(k.name for k in manifest.observation.keys)
        name = model or ("policy.onnx" if backend == "onnxruntime" else manifest.model["file"])
        if name not in manifest.data["files"]:
            raise ManifestError(f"{name} is not part of artifact {artifact_dir}")
        path = manifest.file(name)
        if path.suffix == ".tflite":
            check_tflite_structure(path)
        if isolate:
            from rl2edge.runtime.model_process import ProcessBackend

            return cls(
                manifest,
                ProcessBackend(path, backend, num_threads, call_timeout_s, observation_keys=keys),
                explore,
                noise_seed,
            )
        if probe:
            probe_in_child(path, backend, num_threads, manifest.data["files"][name], keys)
        return cls(manifest, open_backend(path, backend, num_threads, keys), explore, noise_seed)

    def close(self) -> None:
        """Release the interpreter's process, where it has one (isolate=True); the policy is not used again."""
        close = getattr(self._backend, "close", None)
        if close is not None:
            close()

    @property
    def backend(self) -> Backend:
        """The interpreter: its tensor names, dtypes and quantization parameters, and bare `run`."""
        return self._backend

    @property
    def backend_name(self) -> str:
        return self._backend.name

    @property
    def action_index_range(self) -> tuple[int, int]:
        """Discrete actions: the first and last valid index."""
        return self._lo, self._hi

    def model_input(self, obs: Any, validated: bool = False) -> np.ndarray:
        """The validated observation as the model takes it: float32 or quantized, in the model's layout.
        `validated`: the caller has checked it (numeric, the artifact's number of values, finite; the serve
        loop's guard), so the checks are not made twice on the control path."""
        return self._input(obs, validated, reuse=False)

    def _input(self, obs: Any, validated: bool, reuse: bool) -> np.ndarray:
        """model_input; `reuse`: a shifted uint8 frame may be written into the buffer of the last call.
        A Dict observation comes as a mapping of its keys (ObservationError naming a missing, extra or
        misshapen key), or already as the keys' concatenation (the serve loop's vector)."""
        if type(obs) is dict or isinstance(obs, Mapping):
            # A Dict artifact's inputs are float32 (the backend refuses others) in a flat layout: the
            # vector is the model's input once it is checked
            x = self._from_mapping(obs)
            if not validated and not np.isfinite(x).all():
                raise ObservationError(f"observation contains NaN or Inf: {self._first_non_finite(x)}")
            return x.reshape(self._model_shape)
        arr = np.asarray(obs)
        if arr.dtype == np.uint8 and (self._u8_shift is not None or self._uint8_model):
            return self._uint8_input(arr, reuse)
        if not validated:
            if arr.dtype.kind not in "fiu":
                raise ObservationError(
                    f"observation dtype {arr.dtype} is not numeric; expected {self.obs_shape} float32"
                )
            if arr.shape not in self._shapes:
                flat = (
                    f", or its {self.observation_spec.size} values flat"
                    if self.observation_spec.is_matrix
                    else ""
                )
                raise ObservationError(
                    f"observation shape {arr.shape} does not match the artifact's {self.obs_shape}{flat}"
                )
        x = arr.astype(np.float32, copy=False)
        # integers are finite: no pass over a frame
        if not validated and arr.dtype.kind == "f" and not np.isfinite(x).all():
            raise ObservationError("observation contains NaN or Inf")
        if self._axes is not None:
            x = x.reshape(self.obs_shape).transpose(self._axes)
        x = x.reshape(self._model_shape)
        if self._uint8_model:
            return _as_uint8(x)
        if self._in_quant is not None:  # per-call cost matters here: constants precomputed in __init__
            q = np.rint(x * self._in_inv_scale)
            q += self._in_zp
            np.clip(q, self._in_lo, self._in_hi, out=q)
            x = q.astype(self._backend.input_dtype)
        return x

    def _from_mapping(self, obs: Mapping[str, Any]) -> np.ndarray:
        """A Dict observation's keys, in the manifest's order, as one float32 vector. The fast path takes
        1-D arrays of the keys' sizes (frames in their own shape); anything else (a missing or extra key,
        another shape of the right size, lists) goes through the spec's flatten, which takes what fits and
        names what does not."""
        if not self._key_parts:
            raise ObservationError(
                f"the artifact takes a {self.obs_shape} observation, not a mapping of keys {sorted(map(str, obs))}"
            )
        parts = []
        try:
            for name, shape in self._key_shapes:
                v = obs[name]
                if v.shape != shape or v.dtype.kind not in "fiu":
                    break
                parts.append(v.reshape(-1))  # a view; a frame (image key) is row-major in its shape
        except (KeyError, AttributeError):
            pass
        if len(parts) == len(obs) == len(self._key_shapes):
            return np.concatenate(parts, dtype=np.float32)
        flat = self.observation_spec.flatten(obs)  # names a missing, extra or misshapen key
        if flat.dtype.kind not in "fiu":
            bad = [
                k
                for k, v in self.observation_spec.split(flat).items()
                if np.asarray(v).dtype.kind not in "fiu"
            ]
            raise ObservationError(
                f"Dict observation: the values of {bad or 'some keys'} are not numbers ({flat.dtype})"
            )
        return flat.astype(np.float32)

    def _first_non_finite(self, x: np.ndarray) -> str:
        """`key[j] = value` of the first NaN or Inf in a Dict observation's vector."""
        i = int(np.flatnonzero(~np.isfinite(x))[0])
        for name, part in self._key_parts:
            if part.start <= i < part.stop:
                return f"{name}[{i - part.start}] = {x[i]}"
        return f"[{i}] = {x[i]}"

    def _uint8_input(self, arr: np.ndarray, reuse: bool) -> np.ndarray:
        if arr.shape != self.obs_shape and arr.shape != (1, *self.obs_shape):
            raise ObservationError(
                f"observation shape {arr.shape} does not match the artifact's {self.obs_shape}"
            )
        x = arr.reshape(self.obs_shape)
        if self._axes is not None:
            x = x.transpose(self._axes)
        if self._u8_shift:
            out = (
                self._u8_buffer
                if reuse and self._u8_buffer is not None
                else np.empty(self._model_shape, np.uint8)
            )
            np.bitwise_xor(x.reshape(self._model_shape), np.uint8(self._u8_shift), out=out)
            return out.view(np.int8)
        return np.ascontiguousarray(x).reshape(self._model_shape)

    def warm_up(self, obs: np.ndarray) -> None:
        """Run the model on a validated observation and throw the result away, touching no state: the serve
        loop calls it in the spin before a cycle, so that the cycle's decision finds the interpreter's code
        and buffers in the CPU's caches. Folded noise gets zeros and OU's state is left as it is."""
        x = self._input(obs, True, reuse=True)
        b = self._backend  # a model process is asked to stay awake for the cycle's call (warm_run)
        if self.noise is None and not self.states:
            getattr(b, "warm_run", b.run)(x)
        else:
            feeds = self.states.feeds()  # read, not advanced: the outputs are thrown away
            if self.noise is not None:
                io = self.noise["graph"]
                feeds[io["noise_input"]] = np.zeros(self._noise_shape, np.float32)
            getattr(b, "warm_run_with", b.run_with)(x, feeds)

    def raw(self, obs: Any, validated: bool = False) -> np.ndarray:
        """Invoke without the final clamp (the head's own output, dequantized): for verification."""
        x = self._input(obs, validated, reuse=True)
        if self.noise is None and not self.states:
            y = self._backend.run(x)
        else:
            feeds = self.states.feeds()
            ou, kept = self._ou, None
            if self.noise is not None:
                feeds.update(self._feeds())
                if ou and not self.explore:  # exploration off: OU's state zero in, and kept as it was
                    kept = feeds[ou]
                    feeds[ou] = np.zeros_like(kept)
            y, extras = self._backend.run_with(x, feeds)
            self.states.advance(extras)
            if ou and kept is not None:
                self.states.put(ou, kept)
        if self._out_quant is not None:
            scale, zp = self._out_quant
            y = (y.astype(np.float32) - zp) * scale
        return y

    def predict(self, obs: Any, validated: bool = False) -> int | np.ndarray:
        """Observation as the environment gives it (a Dict env's: a mapping of its keys) -> action in the
        environment's units. `validated`: the caller has checked it already (numeric, obs_size values, finite: the serve loop's guard), so it is
        not checked twice on the control path."""
        try:
            y = self.raw(obs, validated)
        except (ValueError, RuntimeError) as exc:
            raise BackendError(f"{self._backend.name} failed to run the model: {exc}") from None
        if self.discrete:
            return min(max(int(y.flat[0]), self._lo), self._hi)  # Python ints: np.clip costs more here
        if self.categorical:  # the graph's argmax per component: integers, held to each one's indices
            idx = np.asarray(y).reshape(self._index_lo.shape)
            if not np.issubdtype(idx.dtype, np.integer):
                if not np.isfinite(idx).all():
                    raise BackendError(f"the model returned a non-finite action {idx.tolist()}")
                idx = np.rint(idx)
            return np.clip(idx.astype(np.int64), self._index_lo, self._index_hi)
        a = np.asarray(y, np.float32).reshape(self.action_low.shape)
        if not np.isfinite(a).all():  # clipping would pass NaN through to the actuator
            raise BackendError(f"the model returned a non-finite action {a.tolist()}")
        return np.clip(a, self.action_low, self.action_high)


def _model_layout(manifest: Manifest, backend: Backend) -> str | None:
    if backend.format == "onnx":
        return (manifest.data.get("onnx") or {}).get("input_layout")
    return (manifest.model.get("input") or {}).get("layout")


def _as_uint8(x: np.ndarray) -> np.ndarray:
    """Observations of a uint8 space given in another dtype (a PLC's REAL nodes): rounded to the integers
    the env would have given and clipped to 0..255, as an int8 file's input quantization clips them (the
    serve loop's guard refuses what lies beyond the space's bounds and its tolerance)."""
    q = np.rint(x)
    np.clip(q, 0, 255, out=q)
    return q.astype(np.uint8)


def _transpose_axes(obs_layout: str, model_layout: str | None) -> tuple[int, ...] | None:
    """Axes that take an observation in `obs_layout` (HWC, CHW) to the model's (NHWC, NCHW), batch aside."""
    if obs_layout == "flat" or not model_layout:
        return None
    target = model_layout[1:] if model_layout.startswith("N") else model_layout
    if sorted(target) != sorted(obs_layout):
        raise ManifestError(f"model input layout {model_layout} does not fit observation layout {obs_layout}")
    axes = tuple(obs_layout.index(c) for c in target)
    return None if axes == tuple(range(len(axes))) else axes
