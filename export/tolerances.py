"""Every tolerance of the export's verification, in one place."""

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Tolerances:
    fp32_action_atol: float = 1e-4
    """ONNX and TFLite fp32 vs the source, max |action difference| in env units (Box)."""
    discrete_margin: float = 1e-4
    """Discrete: observations whose top-two logits differ by less than this may disagree (a near tie)."""
    calibration_max_samples: int = 1000
    """Representative observations handed to the int8 calibrator."""
    heldout_max_samples: int = 2000
    """Held-out observations on which every file is compared with the source."""
    calibration_min_samples: int = 500
    """Rollouts go on past --calib-episodes until the calibration set holds at least this many observations
    (a weak policy's short episodes would otherwise give a thin set), bounded by ROLLOUT_MAX_EPISODES."""
    heldout_min_samples: int = 500
    """Likewise for the held-out set every file is verified on: a short-lived policy is checked on as many
    observations as a good one."""
    noise_off_rtol: float = 1e-5
    """Folded noise fed zeros vs the deterministic head, max |difference| relative to max(1, max |action|).
    They are two traced graphs of the same arithmetic, which the framework may fuse differently (oneDNN
    picks kernels by ISA: AVX-512 machines differ from AVX2 ones by ~1e-7); float32 rounding is a few
    ulps (1.2e-7 each) per layer, so 1e-5 leaves a 10x margin while any real noise (sigma >= 1e-3) fails."""

    def to_json(self) -> dict[str, float]:
        return asdict(self)


DEFAULT = Tolerances()


# Bounds on the rollouts that collect those samples, so that collection always ends: an episode is cut after
# ROLLOUT_MAX_EPISODE_STEPS steps (a policy whose episodes never end), and no more than ROLLOUT_MAX_EPISODES
# episodes are run for one set; a set still under its minimum then gets a one-line warning.
ROLLOUT_MAX_EPISODE_STEPS = 10_000
ROLLOUT_MAX_EPISODES = 300

# Figures of the export's checks that are not tolerances of one file against its source (not recorded per
# file in the manifest); kept here so that every threshold of the export is in one place.
AUTO_LATENCY_TIE_PCT = 5.0
"""--quantize auto: predict p50s within this % of the fastest are a tie (the interleaved measurement's
run-to-run spread on a shared machine is a few %), broken by the smaller file."""
RETURN_DROP_WARNING_PCT = 5.0
"""Warn when a quantized file's closed-loop mean return is below fp32's by more than this % of the return's
scale (export.return_check: the larger of |fp32's mean| and its spread over the episodes)."""
NOISE_N_SIGMA = 5.0
"""Folded noise: sample mean and std within this many standard errors of the configured distribution."""
NOISE_SLACK = {"fp32": (1e-3, 0.0), "fp16": (5e-3, 0.02), "dynamic": (0.03, 0.05), "int8": (0.03, 0.05)}
"""Folded noise, per mode: (atol on the mean, rtol on the std) beyond sampling error. The deterministic part
of an int8 file differs from the source's by its quantization error, which shifts the sampled actions' mean
and spread a little."""
