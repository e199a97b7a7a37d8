"""The PyG side of ``experiments/bench_train.py``: a standalone script run by the PyG virtual
environment's python (it imports torch, torch_geometric and NumPy only, never codesign).

    <venv>/bin/python experiments/bench_pyg_child.py SPEC.json

SPEC.json (written by `bench_train`): ``graph_npz`` (senders, receivers, x, y,
train_mask, n_nodes), ``config`` (a `CONFIGS` name), ``model`` ("gcn" | "gat" | "sage"), ``hidden``,
``heads``, ``out_heads``, ``dropout``, ``lr``, ``weight_decay``, ``epochs``, ``seed``,
``threads``. Prints one JSON line: ``epoch_s`` (list, s), ``first_step_s``, ``first_loss`` (the
loss of the first epoch, before any update: equal across configurations up to rounding, since
both draw the same initial weights and dropout masks), ``baseline_rss_mib``, ``peak_mib``,
``peak_first_step_mib``, ``peak_reset``, ``final_loss``, ``versions``.

The models are the ones of PyG's own examples (``examples/gcn.py``, ``examples/gat.py``; GraphSAGE:
``SAGEConv`` with its defaults, mean aggregation of the neighbours plus a root weight, as
``examples/ogbn_products_sage.py`` builds it, here full-batch with two layers),
``torch.optim.Adam`` with L2 ``weight_decay`` (the same update as optax ``add_decayed_weights``
followed by ``adam``), in one of two configurations (`CONFIGS`):

  * ``pyg``: ``GCNConv`` / ``GATConv`` on ``edge_index`` [2, E] (row 0 = senders): self-loops and
    normalization done by the layers on every call (as codesign's models do), aggregation by
    gather + scatter.
  * ``pyg_csr``: the configuration PyG's "Memory-Efficient Aggregations" guide recommends on CPU:
    a sparse ``adj_t`` [N, N] (row = receiver, column = sender: the transpose of A) in place of
    ``edge_index``, here torch's native CSR, ``torch_geometric.utils.to_torch_csr_tensor(
    edge_index.flip(0), size=(N, N))``: the tensor ``T.ToSparseTensor(layout=torch.sparse_csr)``
    builds (checked on Cora), and its default when torch_sparse is not installed, as here.
    GCN: ``GCNConv(..., cached=True)``, so ``gcn_norm`` (self-loops, D^-1/2 (A+I) D^-1/2 on the
    CSR values) runs in the first epoch only and every later aggregation is one
    ``torch.sparse.mm`` (PyG's ``spmm``), forward and backward. GAT: ``GATConv`` on the same
    ``adj_t`` (it has no ``cached``; its attention needs per-edge messages, so PyG's
    ``MessagePassing._collect`` turns the CSR back into edge indices on every call: expect no
    gain). ``adj_t`` is built after the memory baseline (a per-graph structure, like codesign's
    ``CsrPattern``) and ``edge_index`` dropped, as ``ToSparseTensor`` does by default.

Timing and memory follow `bench_train` exactly (`bench_train` imports the
memory helpers below, so the two sides share one definition): an epoch is forward + backward +
optimizer step, timed with ``time.perf_counter``; the first epoch is timed apart
(``first_step_s``); memory is the peak resident set size (VmHWM) over the timed epochs minus the
RSS measured after imports and loading the graph into framework tensors, with the high-water
mark reset (``/proc/self/clear_refs``) after that baseline and again after the first epoch.
"""

from __future__ import annotations

import json
import os
import sys
import time

_MIB = float(1 << 20)
CONFIGS = ("pyg", "pyg_csr")
"""PyG configurations (module docstring): ``pyg`` = ``edge_index``; ``pyg_csr`` = cached GCN
normalization on a torch CSR ``adj_t``."""


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak() -> bool:
    """Resets VmHWM to the current RSS (Linux >= 4.0); False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def rss_mib() -> float:
    """Resident set size of this process (VmRSS), MiB."""
    return _status_kib("VmRSS") * 1024 / _MIB


def peak_mib() -> float:
    """Peak resident set size of this process since start or the last `reset_peak` (VmHWM), MiB."""
    return _status_kib("VmHWM") * 1024 / _MIB


def run_child(cmd: list, env: dict | None = None, capture_stderr: bool = True) -> tuple[int, str, str, float]:
    """Runs ``cmd`` to completion: ``(exit code, stdout, stderr, peak RSS of its whole life in MiB)``,
    the peak from ``wait4``'s ``ru_maxrss`` (``subprocess.run`` drops the child's rusage). The exit
    code is negative for a signal (-9: SIGKILL, the kernel's out-of-memory killer). Without
    ``capture_stderr`` the child writes to this process's stderr as it runs (stderr returned "")."""
    import subprocess
    import tempfile
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=err if capture_stderr else None,
                                text=True, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = rc = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        return rc, out.read(), err.read(), usage.ru_maxrss * 1024 / _MIB


def main(spec_path: str) -> dict:
    with open(spec_path) as f:
        spec = json.load(f)
    if spec["config"] not in CONFIGS:
        raise ValueError(f"bench_pyg_child: unknown config {spec['config']!r}; choose from {CONFIGS}")
    import numpy as np
    import torch
    import torch.nn.functional as F
    import torch_geometric
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv

    torch.set_num_threads(int(spec["threads"]))
    torch.manual_seed(int(spec["seed"]))
    g = np.load(spec["graph_npz"])
    x = torch.from_numpy(np.ascontiguousarray(g["x"], dtype=np.float32))  # no copy when float32
    y = torch.from_numpy(g["y"].astype(np.int64))
    train_mask = torch.from_numpy(g["train_mask"].astype(bool))
    edge_index = torch.from_numpy(np.stack([g["senders"], g["receivers"]]).astype(np.int64))  # row 0 = source
    n = int(g["n_nodes"])
    del g
    baseline = rss_mib()
    reset = reset_peak()
    csr = spec["config"] == "pyg_csr"
    if csr:  # rows = receivers: the transposed adjacency PyG's sparse path expects
        from torch_geometric.utils import to_torch_csr_tensor
        adj = to_torch_csr_tensor(edge_index.flip(0), size=(n, n))
        del edge_index
    else:
        adj = edge_index

    n_in, n_cls, hidden, p = x.shape[1], int(y.max()) + 1, int(spec["hidden"]), float(spec["dropout"])

    class GCN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = GCNConv(n_in, hidden, cached=csr), GCNConv(hidden, n_cls, cached=csr)

        def forward(self, x, adj):
            h = F.relu(self.conv1(F.dropout(x, p, self.training), adj))
            return self.conv2(F.dropout(h, p, self.training), adj)

    class GAT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            heads, out_heads = int(spec["heads"]), int(spec["out_heads"])
            self.conv1 = GATConv(n_in, hidden, heads=heads, dropout=p)
            self.conv2 = GATConv(hidden * heads, n_cls, heads=out_heads, concat=False, dropout=p)

        def forward(self, x, adj):
            h = F.elu(self.conv1(F.dropout(x, p, self.training), adj))
            return self.conv2(F.dropout(h, p, self.training), adj)

    class SAGE(torch.nn.Module):  # mean aggregation, root weight, one bias: codesign's SAGEConv
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = SAGEConv(n_in, hidden), SAGEConv(hidden, n_cls)

        def forward(self, x, adj):
            h = F.relu(self.conv1(F.dropout(x, p, self.training), adj))
            return self.conv2(F.dropout(h, p, self.training), adj)

    model = {"gcn": GCN, "gat": GAT, "sage": SAGE}[spec["model"]]()
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=float(spec["lr"]), weight_decay=float(spec["weight_decay"]))

    def step():
        opt.zero_grad(set_to_none=True)
        out = model(x, adj)
        loss = F.cross_entropy(out[train_mask], y[train_mask])
        loss.backward()
        opt.step()
        return float(loss.detach())

    t0 = time.perf_counter()
    first_loss = step()
    first_step_s = time.perf_counter() - t0
    peak_first, resident = peak_mib() - baseline, rss_mib() - baseline
    reset_peak()
    epoch_s, loss = [], float("nan")
    for _ in range(int(spec["epochs"])):
        t0 = time.perf_counter()
        loss = step()
        epoch_s.append(time.perf_counter() - t0)
    return {"epoch_s": epoch_s, "first_step_s": first_step_s, "baseline_rss_mib": baseline,
            "peak_mib": peak_mib() - baseline, "peak_first_step_mib": peak_first,
            "resident_after_first_step_mib": resident, "peak_reset": reset,
            "first_loss": first_loss, "final_loss": loss, "config": spec["config"],
            "threads": torch.get_num_threads(),
            "versions": {"torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
                         "python": sys.version.split()[0]}}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {os.path.basename(sys.argv[0])} SPEC.json")
    print(json.dumps(main(sys.argv[1])))
