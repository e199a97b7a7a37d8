"""Shared helpers of the Pallas kernel tests: the GPU switch, relative error, and lowering a
function for CUDA on any host to count its Triton custom calls."""

import contextlib
import re

import jax
import numpy as np
from jax.experimental.pallas import triton as plgpu

ON_GPU = jax.default_backend() == "gpu"
# jaxlib <= 0.10.2 names the call "__gpu$xla.gpu.triton"; newer ones may use "triton_kernel_call*".
TRITON_CALL_TARGETS = tuple({getattr(plgpu, "CUSTOM_CALL_TARGET_NAME", "__gpu$xla.gpu.triton"),
                             "__gpu$xla.gpu.triton", "triton_kernel_call"})


def rel_err(a, b) -> float:
    """``||a - b|| / ||b||`` in float64."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def cuda_target():
    """Context for lowering to CUDA on a machine without a GPU: JAX >= 0.11 reads the GPU model
    from the device or an abstract mesh while lowering Triton calls (older versions ignore the
    mesh), so an H100 is named."""
    if ON_GPU:
        return contextlib.nullcontext()
    device = jax.sharding.AbstractDevice("NVIDIA H100", 1, "cuda")
    mesh = jax.sharding.AbstractMesh((1,), ("x",), (jax.sharding.AxisType.Explicit,), abstract_device=device)
    return jax.sharding.use_abstract_mesh(mesh)


def lowered_text(fn, *args) -> str:
    """StableHLO text of ``jax.jit(fn)`` lowered for CUDA (on any host)."""
    with cuda_target():
        return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


def triton_calls(text: str) -> list[str]:
    """The Triton custom-call targets in lowered ``text``."""
    targets = re.findall(r"custom_call @([\w$.]+)|call_target_name = \"([\w$.]+)\"", text)
    return [t for pair in targets for t in pair if t and any(t.startswith(n) for n in TRITON_CALL_TARGETS)]
