"""mlakv: NVFP4 / fp8 KV-cache records for DeepSeek-style sparse MLA, from Python.

A ctypes binding of libmlakv (no compiled extension). The library is found through
$MLAKV_LIBRARY, then the copy inside this package (`pip install .`), then the source tree's
build/libmlakv.so (`make` at the repository root), then the system loader path. numpy is required; torch is optional and only used when you pass torch
tensors or ask for a CUDA cache.

    import numpy as np, mlakv
    cache = mlakv.PagedCache("nvfp4_ds_mla", num_blocks=16, block_size=64)
    mlakv.write(kv_c, k_pe, cache, slot_mapping)          # numpy [n,512], [n,64], int64 [n]
    out, lse = mlakv.sparse_decode(q, cache, indices)     # q [b,s_q,h,576], indices int32

Errors from the C library raise MlakvError (status name + the library's message); argument
checks done in Python raise TypeError / ValueError naming the argument.

With torch installed, `import mlakv.torch_ops` registers the operators torch.ops.mlakv.*
(write, sparse_decode, gather_bf16, gather_upconvert, encode_records, decode_records) over an
engine's own cache tensor; mlakv.compat.vllm and mlakv.compat.flashmla give vLLM's and
FlashMLA's call signatures.
"""

from ._info import (Capacity, Format, FormatInfo, Model, ModelInfo, Status, bf16_to_f32,
                    cache_bytes, cuda_check_device, cuda_compiled, decode_record, e2m1_decode,
                    e2m1_encode, e4m3_decode, e4m3_encode, encode_record, f16_to_f32,
                    f32_to_bf16, f32_to_f16, format_info, formats, model_info, models,
                    plan_capacity, record_bytes, version)
from ._lib import (LATENT_DIM, QK_DIM, ROPE_DIM, V_DIM, MlakvError, last_error, library_path,
                   status_name)
from ._ops import (PagedCache, decode_workspace_size, merge_partials, read, sparse_decode,
                   sparse_decode_partial, write)

__version__ = "0.2.0"


def __getattr__(name):
    # torch.ops.mlakv is registered on first use of mlakv.torch_ops (or mlakv.compat), so that
    # `import mlakv` never imports torch.
    if name in ("torch_ops", "compat"):
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'mlakv' has no attribute {name!r}")

__all__ = [
    "Capacity", "Format", "FormatInfo", "Model", "ModelInfo", "Status", "MlakvError",
    "PagedCache", "LATENT_DIM", "ROPE_DIM", "QK_DIM", "V_DIM",
    "version", "library_path", "status_name", "last_error",
    "formats", "format_info", "record_bytes", "models", "model_info", "plan_capacity",
    "cache_bytes", "encode_record", "decode_record",
    "e4m3_encode", "e4m3_decode", "e2m1_encode", "e2m1_decode",
    "bf16_to_f32", "f32_to_bf16", "f16_to_f32", "f32_to_f16",
    "write", "read", "sparse_decode", "sparse_decode_partial", "merge_partials",
    "decode_workspace_size", "cuda_compiled", "cuda_check_device",
]
