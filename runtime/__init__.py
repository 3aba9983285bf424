"""What goes on the device: the artifact contract, interpreter backends and the guarded policy.

Imports numpy and one interpreter (ai-edge-litert, tflite-runtime, tensorflow.lite or onnxruntime),
never torch, and tensorflow only as the last-resort interpreter, when nothing lighter is installed.
"""

from rl2edge.runtime.manifest import Manifest, load_manifest
from rl2edge.runtime.policy import Policy

__all__ = ["Manifest", "Policy", "load_manifest"]
