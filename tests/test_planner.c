/* Capacity planner: model presets, bytes per token, rounding to whole blocks, dcp, errors. */
#include <limits.h>
#include <string.h>

#include "testutil.h"

/* Presets as the issue states them: MLA layers, MTP layers, indexer layers, MTP indexer. */
static const struct {
    const char *name;
    mlakv_model model;
    int mla, mtp, idx, mtp_idx;
} presets[] = {
    {"deepseek-v3.2", MLAKV_MODEL_DEEPSEEK_V32, 61, 1, 61, 1},
    {"glm-5.2", MLAKV_MODEL_GLM_5_2, 78, 1, 21, 1},
    {"glm-5", MLAKV_MODEL_GLM_5, 78, 1, 78, 1},
};
static const int64_t record_bytes[MLAKV_FORMAT_COUNT] = {656, 432, 368, 368};

static int same_capacity(const mlakv_capacity *a, const mlakv_capacity *b) {
    return memcmp(a, b, sizeof *a) == 0;
}

static void poison(mlakv_capacity *c) { memset(c, 0xA5, sizeof *c); }

int main(void) {
    tu_rng rng;
    tu_rng_init(&rng, tu_seed("test_planner"));
    mlakv_capacity c, guard;

    /* The figures the issue asks for: GLM-5.2 with MTP. */
    CHECK_OK(mlakv_plan_capacity(MLAKV_MODEL_GLM_5_2, MLAKV_FP8_DS_MLA, 1ull << 30, 64, 1, 1, &c));
    CHECKF(c.bytes_per_token == 54728, "fp8 GLM-5.2 B/token %lld", (long long)c.bytes_per_token);
    CHECK_OK(mlakv_plan_capacity(MLAKV_MODEL_GLM_5_2, MLAKV_NVFP4_DS_MLA, 1ull << 30, 64, 1, 1, &c));
    CHECKF(c.bytes_per_token == 37032, "nvfp4 GLM-5.2 B/token %lld", (long long)c.bytes_per_token);
    /* 40 GiB, block 64: floor(42949672960 / (54728 * 64)) = 12262 blocks. */
    CHECK_OK(mlakv_plan_capacity(MLAKV_MODEL_GLM_5_2, MLAKV_FP8_DS_MLA, 40ull << 30, 64, 1, 1, &c));
    CHECKF(c.blocks == 12262 && c.tokens_per_gpu == 12262 * 64 && c.tokens == 12262 * 64,
           "blocks %lld", (long long)c.blocks);

    /* Presets and names. */
    for (size_t p = 0; p < sizeof presets / sizeof presets[0]; p++) {
        const mlakv_model_info *mi = mlakv_model_get(presets[p].model);
        if (!CHECK(mi != NULL)) continue;
        CHECKF(strcmp(mi->name, presets[p].name) == 0, "name %s", mi->name);
        CHECKF(mi->mla_layers == presets[p].mla && mi->mtp_layers == presets[p].mtp &&
                   mi->indexer_layers == presets[p].idx &&
                   mi->mtp_indexer_layers == presets[p].mtp_idx &&
                   mi->indexer_bytes_per_token == 132,
               "%s layers %d+%d idx %d+%d x %d", mi->name, mi->mla_layers, mi->mtp_layers,
               mi->indexer_layers, mi->mtp_indexer_layers, mi->indexer_bytes_per_token);
        mlakv_model m = MLAKV_MODEL_COUNT;
        CHECK_OK(mlakv_model_from_name(presets[p].name, &m));
        CHECK(m == presets[p].model);
    }
    CHECK(mlakv_model_get(MLAKV_MODEL_COUNT) == NULL);
    CHECK(mlakv_model_get((mlakv_model)-1) == NULL);
    mlakv_model m = MLAKV_MODEL_GLM_5;
    CHECK_STATUS(mlakv_model_from_name("glm-5.3", &m), MLAKV_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(mlakv_model_from_name("GLM", &m), MLAKV_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(mlakv_model_from_name("", &m), MLAKV_ERR_INVALID_ARGUMENT);
    CHECK(m == MLAKV_MODEL_GLM_5);
    CHECK_STATUS(mlakv_model_from_name(NULL, &m), MLAKV_ERR_NULL_POINTER);
    CHECK_STATUS(mlakv_model_from_name("glm-5", NULL), MLAKV_ERR_NULL_POINTER);

    /* Every model x format x mtp: bytes per token from the layer counts; random budgets,
     * block sizes and dcp: whole blocks, the largest count that fits. */
    for (size_t p = 0; p < sizeof presets / sizeof presets[0]; p++) {
        for (int f = 0; f < MLAKV_FORMAT_COUNT; f++) {
            for (int mtp = 0; mtp <= 1; mtp++) {
                int64_t want_bpt = (presets[p].mla + mtp * presets[p].mtp) * record_bytes[f] +
                                   (int64_t)(presets[p].idx + mtp * presets[p].mtp_idx) * 132;
                for (int trial = 0; trial < 400; trial++) {
                    uint64_t budget;
                    switch (trial % 4) {
                    case 0: budget = (uint64_t)tu_range(&rng, 0, 1000000); break;
                    case 1: budget = (uint64_t)tu_range(&rng, 0, INT64_MAX); break;
                    case 2: budget = tu_next(&rng); break;
                    default: /* exactly k blocks, or one byte short */
                        budget = (uint64_t)want_bpt * 64 * (uint64_t)tu_range(&rng, 0, 100000) -
                                 (uint64_t)(trial & 4 ? 1 : 0);
                        if (budget == UINT64_MAX) budget = 0;
                    }
                    int64_t bs = trial % 3 == 0 ? 64 : tu_range(&rng, 1, trial % 5 == 0 ? 1000000 : 300);
                    int dcp = (int)tu_range(&rng, 1, 17);
                    poison(&c);
                    CHECK_OK(mlakv_plan_capacity(presets[p].model, (mlakv_format)f, budget, bs,
                                                 dcp, mtp, &c));
                    CHECKF(c.bytes_per_token == want_bpt, "%s f%d mtp%d: %lld want %lld",
                           presets[p].name, f, mtp, (long long)c.bytes_per_token,
                           (long long)want_bpt);
                    /* blocks * bs * bpt <= budget < (blocks + 1) * bs * bpt, in long double
                     * (exact: all quantities < 2^64, products < 2^128 checked via division). */
                    uint64_t per_block_fit = budget / (uint64_t)want_bpt; /* tokens that fit */
                    uint64_t want_blocks = per_block_fit / (uint64_t)bs;
                    CHECKF((uint64_t)c.blocks == want_blocks, "blocks %lld want %llu",
                           (long long)c.blocks, (unsigned long long)want_blocks);
                    CHECK((uint64_t)c.tokens_per_gpu == want_blocks * (uint64_t)bs);
                    CHECK(c.tokens == c.tokens_per_gpu * dcp);
                    /* independent check of "fits": tokens_per_gpu * bpt <= budget and one more
                     * block does not fit */
                    long double used = (long double)c.tokens_per_gpu * (long double)want_bpt;
                    long double more = used + (long double)bs * (long double)want_bpt;
                    CHECK(used <= (long double)budget);
                    CHECK(more > (long double)budget);
                }
            }
        }
    }

    /* Budget 0: valid, zero tokens. */
    poison(&c);
    CHECK_OK(mlakv_plan_capacity(MLAKV_MODEL_GLM_5, MLAKV_NVFP4_FP8_ROPE, 0, 64, 4, 1, &c));
    CHECK(c.blocks == 0 && c.tokens_per_gpu == 0 && c.tokens == 0 && c.bytes_per_token > 0);
    /* Less than one block: zero. */
    CHECK_OK(mlakv_plan_capacity(MLAKV_MODEL_GLM_5_2, MLAKV_FP8_DS_MLA, 54728ull * 64 - 1, 64, 1, 1, &c));
    CHECK(c.blocks == 0 && c.tokens == 0);
    CHECK_OK(mlakv_plan_capacity(MLAKV_MODEL_GLM_5_2, MLAKV_FP8_DS_MLA, 54728ull * 64, 64, 1, 1, &c));
    CHECK(c.blocks == 1 && c.tokens == 64);
    /* Huge block size: no overflow in block_size * bytes_per_token. */
    CHECK_OK(mlakv_plan_capacity(MLAKV_MODEL_GLM_5_2, MLAKV_FP8_DS_MLA, UINT64_MAX, INT64_MAX, 1, 1, &c));
    CHECK(c.blocks == 0 && c.tokens == 0);
    /* Largest budget, block 1, dcp 1 fits int64. */
    CHECK_OK(mlakv_plan_capacity(MLAKV_MODEL_DEEPSEEK_V32, MLAKV_NVFP4_FP8_ROPE, UINT64_MAX, 1, 1, 0, &c));
    CHECK(c.tokens > 0 && (uint64_t)c.tokens == UINT64_MAX / (uint64_t)c.bytes_per_token);

    /* Errors: status returned, result untouched. */
    poison(&guard);
    c = guard;
    CHECK_STATUS(mlakv_plan_capacity(MLAKV_MODEL_GLM_5_2, MLAKV_FP8_DS_MLA, 1 << 30, 64, 1, 1, NULL),
                 MLAKV_ERR_NULL_POINTER);
    CHECK_STATUS(mlakv_plan_capacity(MLAKV_MODEL_COUNT, MLAKV_FP8_DS_MLA, 1 << 30, 64, 1, 1, &c),
                 MLAKV_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(mlakv_plan_capacity((mlakv_model)-3, MLAKV_FP8_DS_MLA, 1 << 30, 64, 1, 1, &c),
                 MLAKV_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(mlakv_plan_capacity(MLAKV_MODEL_GLM_5_2, MLAKV_FORMAT_COUNT, 1 << 30, 64, 1, 1, &c),
                 MLAKV_ERR_UNKNOWN_FORMAT);
    CHECK_STATUS(mlakv_plan_capacity(MLAKV_MODEL_GLM_5_2, (mlakv_format)-1, 1 << 30, 64, 1, 1, &c),
                 MLAKV_ERR_UNKNOWN_FORMAT);
    CHECK_STATUS(mlakv_plan_capacity(MLAKV_MODEL_GLM_5_2, MLAKV_FP8_DS_MLA, 1 << 30, 0, 1, 1, &c),
                 MLAKV_ERR_GEOMETRY);
    CHECK_STATUS(mlakv_plan_capacity(MLAKV_MODEL_GLM_5_2, MLAKV_FP8_DS_MLA, 1 << 30, -64, 1, 1, &c),
                 MLAKV_ERR_GEOMETRY);
    CHECK_STATUS(mlakv_plan_capacity(MLAKV_MODEL_GLM_5_2, MLAKV_FP8_DS_MLA, 1 << 30, INT64_MIN, 1, 1, &c),
                 MLAKV_ERR_GEOMETRY);
    CHECK_STATUS(mlakv_plan_capacity(MLAKV_MODEL_GLM_5_2, MLAKV_FP8_DS_MLA, 1 << 30, 64, 0, 1, &c),
                 MLAKV_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(mlakv_plan_capacity(MLAKV_MODEL_GLM_5_2, MLAKV_FP8_DS_MLA, 1 << 30, 64, -2, 1, &c),
                 MLAKV_ERR_INVALID_ARGUMENT);
    /* tokens_per_gpu * dcp beyond int64 */
    CHECK_STATUS(mlakv_plan_capacity(MLAKV_MODEL_GLM_5_2, MLAKV_NVFP4_FP8_ROPE, UINT64_MAX, 1, INT_MAX, 1, &c),
                 MLAKV_ERR_OVERFLOW);
    CHECK(same_capacity(&c, &guard));
    CHECK(strlen(mlakv_last_error()) > 0);
    return tu_finish();
}
