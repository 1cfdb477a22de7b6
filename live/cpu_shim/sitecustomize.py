"""Loaded by every process of the live suite's prefill/decode pairs and Mixture-of-Experts
servers (it is first on PYTHONPATH): two patches for a machine without a GPU, each made right
after SGLang's module is first imported, and nothing else changed.

- Mooncake's sender must take the generic page-index path: with
  `MooncakeKVSender.supports_host_tensor_indices` true, SGLang's prefill scheduler copies the
  page indices into pinned memory and records a CUDA event (`srt/disaggregation/prefill.py`,
  `_send_kv_chunk`), and dies with "Found no NVIDIA driver". It is set to False.
- `--enable-return-routed-experts` allocates its host cache with
  `ALLOC_MEMORY_FUNCS["cpu"]`, which pins memory with cudaHostRegister and dies the same way.
  "cpu" gets a plain `torch.zeros` instead.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

CONNECTOR = "sglang.srt.disaggregation.mooncake.conn"
HOST_POOL = "sglang.srt.mem_cache.pool_host.common"


def _no_host_tensor_indices(module: ModuleType) -> None:
    module.MooncakeKVSender.supports_host_tensor_indices = False


def _unpinned(dims: Any, dtype: Any, device: Any, pin_memory: Any, *args: Any, **kw: Any) -> Any:
    import torch  # the server's own, imported by then

    return torch.zeros(dims, dtype=dtype, device=device)


def _plain_cpu_memory(module: ModuleType) -> None:
    module.ALLOC_MEMORY_FUNCS["cpu"] = _unpinned


#: module name -> what to change in it once it has run.
AFTER_IMPORT: dict[str, Callable[[ModuleType], None]] = {
    CONNECTOR: _no_host_tensor_indices,
    HOST_POOL: _plain_cpu_memory,
}


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then the module's patch."""

    def __init__(self, loader: importlib.abc.Loader, patch: Callable[[ModuleType], None]) -> None:
        self._loader = loader
        self._patch = patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._patch(module)


class _AfterImport(importlib.abc.MetaPathFinder):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        patch = AFTER_IMPORT.get(fullname)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _PatchingLoader(spec.loader, patch)
        return spec


if not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
    sys.meta_path.insert(0, _AfterImport())
