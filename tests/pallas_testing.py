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


def exact_f32_dots():
    """Context running f32 dots at IEEE f32 precision (``jax.default_matmul_precision("highest")``).

    JAX's default f32 dot precision on a GPU is TF32 (inputs rounded to a 10-bit mantissa, about
    5e-4 relative error; NVIDIA A100 / H100 whitepapers), inside Pallas Triton kernels as in XLA.
    The kernel test cases compare with f32 references at 1e-5, so they run under this context;
    the TF32 default is checked apart (``test_f32_default_precision_is_tf32``).
    """
    return jax.default_matmul_precision("highest")


class ExactF32Dots:
    """Test-class mixin: every test runs inside `exact_f32_dots`."""

    def setup_method(self):
        self._precision = exact_f32_dots()
        self._precision.__enter__()

    def teardown_method(self):
        self._precision.__exit__(None, None, None)


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
