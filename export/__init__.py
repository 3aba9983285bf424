"""Export: checkpoint -> deployable graph -> ONNX / SavedModel -> TFLite, quantization, verification.

Imports `train` (to rebuild a policy from its checkpoint) and `runtime` (to write the artifact contract
and to verify the artifact through the very code that will serve it)."""
