/* Calibration file reader and writer (calib_json.h): a hand parser for the one fixed schema. */
#include "calib_json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static int check_values(int n, const float *max_abs, const float *scales, char *err,
                        size_t errlen) {
    if (n < 1 || n > CALIB_MAX_LAYERS)
        return fail(err, errlen, "num_layers %d outside 1..%d", n, CALIB_MAX_LAYERS);
    for (int l = 0; l < n; l++) {
        if (!(scales[l] > 0.0f) || !isfinite(scales[l]))
            return fail(err, errlen, "scales[%d] = %g: must be finite and > 0", l, (double)scales[l]);
        if (!(max_abs[l] >= 0.0f) || !isfinite(max_abs[l]))
            return fail(err, errlen, "max_abs[%d] = %g: must be finite and >= 0", l,
                        (double)max_abs[l]);
    }
    return 0;
}

int calib_write(const char *path, int n, const float *max_abs, const float *scales, char *err,
                size_t errlen) {
    if (check_values(n, max_abs, scales, err, errlen) != 0) return -1;
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return fail(err, errlen, "%s: path too long", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return fail(err, errlen, "%s: %s", tmp, strerror(errno));
    fprintf(f, "{\"format\": \"%s\", \"num_layers\": %d, \"latent_dim\": 512, "
               "\"denominator\": 2688.0,\n \"scales\": [", CALIB_FORMAT_TAG, n);
    /* %.9g: every fp32 value reads back exactly */
    for (int l = 0; l < n; l++) fprintf(f, "%s%.9g", l ? ", " : "", (double)scales[l]);
    fprintf(f, "],\n \"max_abs\": [");
    for (int l = 0; l < n; l++) fprintf(f, "%s%.9g", l ? ", " : "", (double)max_abs[l]);
    fprintf(f, "]}\n");
    if (ferror(f) | (fclose(f) != 0)) {
        remove(tmp);
        return fail(err, errlen, "%s: write failed", tmp);
    }
    if (rename(tmp, path) != 0) {
        const int e = errno;
        remove(tmp);
        return fail(err, errlen, "%s: %s", path, strerror(e));
    }
    return 0;
}

/* ---- reader ---- */

typedef struct {
    const char *start, *p, *end;
    char *err;
    size_t errlen;
} parser;

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int expect(parser *ps, char c) {
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != c)
        return fail(ps->err, ps->errlen, "malformed JSON: expected '%c' at byte %ld", c,
                    (long)(ps->p - ps->start));
    ps->p++;
    return 0;
}

/* a string without escapes (the schema's keys and tag have none) into buf */
static int parse_string(parser *ps, char *buf, size_t cap) {
    if (expect(ps, '"') != 0) return -1;
    size_t k = 0;
    while (ps->p < ps->end && *ps->p != '"') {
        if (*ps->p == '\\' || (unsigned char)*ps->p < 0x20)
            return fail(ps->err, ps->errlen, "malformed JSON: escape or control character in a string");
        if (k + 1 >= cap) return fail(ps->err, ps->errlen, "malformed JSON: string too long");
        buf[k++] = *ps->p++;
    }
    if (ps->p >= ps->end) return fail(ps->err, ps->errlen, "malformed JSON: unterminated string");
    ps->p++;
    buf[k] = '\0';
    return 0;
}

/* a JSON number (strict grammar) as double */
static int parse_number(parser *ps, double *v) {
    skip_ws(ps);
    const char *s = ps->p, *q = s;
    if (q < ps->end && *q == '-') q++;
    if (q >= ps->end || *q < '0' || *q > '9')
        return fail(ps->err, ps->errlen, "malformed JSON: expected a number");
    if (*q == '0') q++;
    else while (q < ps->end && *q >= '0' && *q <= '9') q++;
    if (q < ps->end && *q == '.') {
        q++;
        if (q >= ps->end || *q < '0' || *q > '9')
            return fail(ps->err, ps->errlen, "malformed JSON: bad number");
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    }
    if (q < ps->end && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < ps->end && (*q == '+' || *q == '-')) q++;
        if (q >= ps->end || *q < '0' || *q > '9')
            return fail(ps->err, ps->errlen, "malformed JSON: bad number");
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    }
    char buf[64];
    if ((size_t)(q - s) >= sizeof buf) return fail(ps->err, ps->errlen, "malformed JSON: number too long");
    memcpy(buf, s, (size_t)(q - s));
    buf[q - s] = '\0';
    *v = strtod(buf, NULL);
    ps->p = q;
    return 0;
}

/* [numbers] as fp32 into a malloc'd array */
static int parse_array(parser *ps, const char *name, float **out, int *count) {
    if (expect(ps, '[') != 0) return -1;
    int n = 0, cap = 0;
    float *a = NULL;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
    } else {
        for (;;) {
            double v;
            if (parse_number(ps, &v) != 0) goto bad;
            if (n == CALIB_MAX_LAYERS) {
                fail(ps->err, ps->errlen, "%s: more than %d entries", name, CALIB_MAX_LAYERS);
                goto bad;
            }
            if (n == cap) {
                cap = cap ? 2 * cap : 128;
                float *b = (float *)realloc(a, sizeof(float) * (size_t)cap);
                if (!b) {
                    fail(ps->err, ps->errlen, "out of memory");
                    goto bad;
                }
                a = b;
            }
            a[n++] = (float)v;
            skip_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (expect(ps, ']') != 0) goto bad;
            break;
        }
    }
    *out = a;
    *count = n;
    return 0;
bad:
    free(a);
    return -1;
}

int calib_read(const char *path, calib_file *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return fail(err, errlen, "%s: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 65536;
            if (cap > ((size_t)64 << 20)) {
                fclose(f);
                free(text);
                return fail(err, errlen, "%s: file too large for a calibration file", path);
            }
            char *t = (char *)realloc(text, cap);
            if (!t) {
                fclose(f);
                free(text);
                return fail(err, errlen, "out of memory");
            }
            text = t;
        }
        size_t got = fread(text + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    fclose(f);

    parser ps = {text, text, text + len, err, errlen};
    char key[64], tag[128];
    int have_fmt = 0, have_n = 0, have_dim = 0, have_den = 0, ns = -1, nm = -1;
    double num_layers = 0, dim = 0, den = 0;
    float *scales = NULL, *max_abs = NULL;
    if (expect(&ps, '{') != 0) goto bad;
    for (;;) {
        if (parse_string(&ps, key, sizeof key) != 0 || expect(&ps, ':') != 0) goto bad;
        int dup = 0;
        if (strcmp(key, "format") == 0) {
            dup = have_fmt++;
            if (!dup && parse_string(&ps, tag, sizeof tag) != 0) goto bad;
        } else if (strcmp(key, "num_layers") == 0) {
            dup = have_n++;
            if (!dup && parse_number(&ps, &num_layers) != 0) goto bad;
        } else if (strcmp(key, "latent_dim") == 0) {
            dup = have_dim++;
            if (!dup && parse_number(&ps, &dim) != 0) goto bad;
        } else if (strcmp(key, "denominator") == 0) {
            dup = have_den++;
            if (!dup && parse_number(&ps, &den) != 0) goto bad;
        } else if (strcmp(key, "scales") == 0) {
            dup = ns >= 0;
            if (!dup && parse_array(&ps, "scales", &scales, &ns) != 0) goto bad;
        } else if (strcmp(key, "max_abs") == 0) {
            dup = nm >= 0;
            if (!dup && parse_array(&ps, "max_abs", &max_abs, &nm) != 0) goto bad;
        } else {
            fail(err, errlen, "unknown key \"%s\"", key);
            goto bad;
        }
        if (dup) {
            fail(err, errlen, "key \"%s\" given twice", key);
            goto bad;
        }
        skip_ws(&ps);
        if (ps.p < ps.end && *ps.p == ',') {
            ps.p++;
            continue;
        }
        if (expect(&ps, '}') != 0) goto bad;
        break;
    }
    skip_ws(&ps);
    if (ps.p != ps.end) {
        fail(err, errlen, "malformed JSON: text after the object");
        goto bad;
    }
    if (!have_fmt || !have_n || !have_dim || !have_den || ns < 0 || nm < 0) {
        fail(err, errlen, "missing key (format, num_layers, latent_dim, denominator, scales and "
                          "max_abs are required)");
        goto bad;
    }
    if (strcmp(tag, CALIB_FORMAT_TAG) != 0) {
        fail(err, errlen, "format is \"%s\", want \"%s\"", tag, CALIB_FORMAT_TAG);
        goto bad;
    }
    if (dim != 512) {
        fail(err, errlen, "latent_dim is %g, want 512", dim);
        goto bad;
    }
    if (den != 2688) {
        fail(err, errlen, "denominator is %g, want 2688", den);
        goto bad;
    }
    if (num_layers != floor(num_layers) || num_layers < 1 || num_layers > CALIB_MAX_LAYERS) {
        fail(err, errlen, "num_layers %g is not an integer in 1..%d", num_layers, CALIB_MAX_LAYERS);
        goto bad;
    }
    if (ns != (int)num_layers || nm != (int)num_layers) {
        fail(err, errlen, "num_layers is %d but scales has %d and max_abs %d entries",
             (int)num_layers, ns, nm);
        goto bad;
    }
    if (check_values(ns, max_abs, scales, err, errlen) != 0) goto bad;
    free(text);
    out->num_layers = ns;
    out->scales = scales;
    out->max_abs = max_abs;
    return 0;
bad:
    free(text);
    free(scales);
    free(max_abs);
    return -1;
}

void calib_free(calib_file *c) {
    free(c->scales);
    free(c->max_abs);
    memset(c, 0, sizeof *c);
}
