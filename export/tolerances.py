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

    def to_json(self) -> dict[str, float]:
        return asdict(self)


DEFAULT = Tolerances()
