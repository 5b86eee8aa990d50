"""Engine-shaped entry points: mlakv behind the call signatures engines already use.

`mlakv.compat.vllm` (concat_and_cache_mla, cp_gather_and_upconvert_fp8_kv_cache) and
`mlakv.compat.flashmla` (get_mla_metadata, flash_mla_with_kvcache, flash_mla_sparse_fwd).
Both need torch and run through torch.ops.mlakv.
"""
