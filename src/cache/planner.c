/* Capacity planner: model presets and KV bytes per token / tokens per memory budget. */
#include <stdint.h>
#include <string.h>

#include "common/status.h"
#include "mlakv.h"

/* Indexer cache of DeepSeek sparse attention: 128 fp8 key bytes + one fp32 scale per token. */
#define MLAKV_INDEXER_BYTES 132

static const mlakv_model_info model_presets[MLAKV_MODEL_COUNT] = {
    [MLAKV_MODEL_DEEPSEEK_V32] = {"deepseek-v3.2", 61, 1, 61, 1, MLAKV_INDEXER_BYTES},
    [MLAKV_MODEL_GLM_5_2] = {"glm-5.2", 78, 1, 21, 1, MLAKV_INDEXER_BYTES},
    [MLAKV_MODEL_GLM_5] = {"glm-5", 78, 1, 78, 1, MLAKV_INDEXER_BYTES},
};

const mlakv_model_info *mlakv_model_get(mlakv_model model) {
    if ((int)model < 0 || model >= MLAKV_MODEL_COUNT) return NULL;
    return &model_presets[model];
}

mlakv_status mlakv_model_from_name(const char *name, mlakv_model *model) {
    MLAKV_CHECK_NOT_NULL("mlakv_model_from_name", name);
    MLAKV_CHECK_NOT_NULL("mlakv_model_from_name", model);
    for (int m = 0; m < MLAKV_MODEL_COUNT; m++) {
        if (strcmp(name, model_presets[m].name) == 0) {
            *model = (mlakv_model)m;
            return MLAKV_OK;
        }
    }
    return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT,
                      "mlakv_model_from_name: unknown model \"%.*s%s\" (known: deepseek-v3.2, "
                      "glm-5.2, glm-5)",
                      MLAKV_QUOTE_MAX, name, mlakv_quote_tail(name));
}

mlakv_status mlakv_plan_capacity(mlakv_model model, mlakv_format format, uint64_t budget_bytes,
                                 int64_t block_size, int dcp, int include_mtp,
                                 mlakv_capacity *result) {
    static const char fn[] = "mlakv_plan_capacity";
    MLAKV_CHECK_NOT_NULL(fn, result);
    const mlakv_model_info *mi = mlakv_model_get(model);
    if (mi == NULL)
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT, "%s: unknown model %d", fn, (int)model);
    size_t record = mlakv_record_bytes(format);
    if (record == 0)
        return mlakv_fail(MLAKV_ERR_UNKNOWN_FORMAT, "%s: unknown format %d", fn, (int)format);
    if (block_size < 1)
        return mlakv_fail(MLAKV_ERR_GEOMETRY, "%s: block_size is %lld, must be >= 1", fn,
                          (long long)block_size);
    if (dcp < 1)
        return mlakv_fail(MLAKV_ERR_INVALID_ARGUMENT, "%s: dcp is %d, must be >= 1", fn, dcp);

    int64_t mla = mi->mla_layers + (include_mtp ? mi->mtp_layers : 0);
    int64_t idx = mi->indexer_layers + (include_mtp ? mi->mtp_indexer_layers : 0);
    int64_t bpt = mla * (int64_t)record + idx * (int64_t)mi->indexer_bytes_per_token;

    /* floor(floor(budget / bpt) / block_size) == floor(budget / (bpt * block_size)), without
     * forming the product (block_size may be huge). */
    uint64_t fit = budget_bytes / (uint64_t)bpt;
    uint64_t blocks = fit / (uint64_t)block_size;
    uint64_t per_gpu = blocks * (uint64_t)block_size; /* <= fit: no overflow */
    if (per_gpu > (uint64_t)INT64_MAX || per_gpu > (uint64_t)INT64_MAX / (uint64_t)dcp)
        return mlakv_fail(MLAKV_ERR_OVERFLOW,
                          "%s: %llu tokens per GPU x dcp %d does not fit in int64", fn,
                          (unsigned long long)per_gpu, dcp);
    result->bytes_per_token = bpt;
    result->blocks = (int64_t)blocks;
    result->tokens_per_gpu = (int64_t)per_gpu;
    result->tokens = (int64_t)per_gpu * dcp;
    return MLAKV_OK;
}
