/* The per-layer latent-scale calibration file (what engines serving the static NVFP4 records
 * read):
 *   {"format": "nvfp4_ds_mla_outer_scale_v1", "num_layers": L, "latent_dim": 512,
 *    "denominator": 2688.0, "scales": [L numbers], "max_abs": [L numbers]}
 * scales[l] = s_l of layer l (finite, > 0), max_abs[l] its calibrated max |latent| (finite,
 * >= 0). The reader accepts exactly this schema (keys in any order, each once, JSON
 * whitespace) and rejects anything else with a message; the writer validates first and writes
 * through a temporary file renamed into place, so a failed write leaves no file. */
#ifndef MLAKV_TOOLS_CALIB_JSON_H
#define MLAKV_TOOLS_CALIB_JSON_H

#include <stddef.h>

#define CALIB_FORMAT_TAG "nvfp4_ds_mla_outer_scale_v1"
#define CALIB_MAX_LAYERS 4096

typedef struct {
    int num_layers;
    float *scales;  /* [num_layers], malloc'd */
    float *max_abs; /* [num_layers], malloc'd */
} calib_file;

/* 0 on success; else -1 with a message in err. */
int calib_write(const char *path, int num_layers, const float *max_abs, const float *scales,
                char *err, size_t errlen);
int calib_read(const char *path, calib_file *out, char *err, size_t errlen);
void calib_free(calib_file *c);

#endif
