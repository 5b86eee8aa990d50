/* Minimal PNG line chart: see cmd_eval_plot.h. */
#include "cmd_eval_plot.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- PNG writer (8-bit RGB, zlib stored blocks) ---------------------------------------------- */

static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static uint32_t crc_update(uint32_t c, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c;
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static int write_chunk(FILE *f, const char *type, const uint8_t *data, size_t n) {
    uint8_t hdr[8];
    put32(hdr, (uint32_t)n);
    memcpy(hdr + 4, type, 4);
    uint32_t c = crc_update(0xFFFFFFFFu, hdr + 4, 4);
    c = crc_update(c, data, n) ^ 0xFFFFFFFFu;
    uint8_t tail[4];
    put32(tail, c);
    return fwrite(hdr, 1, 8, f) == 8 && (n == 0 || fwrite(data, 1, n, f) == n) &&
                   fwrite(tail, 1, 4, f) == 4
               ? 0
               : -1;
}

/* ---- deflate with the fixed Huffman code (RFC 1951, BTYPE 01) ------------------------------
 * Matches are only looked for at two distances: one pixel back (3 bytes) and one row back,
 * which is what a chart on a white background repeats; that is enough for ~50-100x. */

typedef struct {
    uint8_t *p;
    size_t n;
    uint32_t acc;
    int bits;
} bitw;

static void put_bits(bitw *w, uint32_t v, int n) { /* LSB first */
    w->acc |= v << w->bits;
    w->bits += n;
    while (w->bits >= 8) {
        w->p[w->n++] = (uint8_t)w->acc;
        w->acc >>= 8;
        w->bits -= 8;
    }
}

static void put_huff(bitw *w, uint32_t code, int n) { /* Huffman codes go MSB first */
    uint32_t r = 0;
    for (int i = 0; i < n; i++) r |= ((code >> i) & 1u) << (n - 1 - i);
    put_bits(w, r, n);
}

static void put_litlen(bitw *w, int v) {
    if (v < 144) put_huff(w, 0x30u + (uint32_t)v, 8);
    else if (v < 256) put_huff(w, 0x190u + (uint32_t)(v - 144), 9);
    else if (v < 280) put_huff(w, (uint32_t)(v - 256), 7);
    else put_huff(w, 0xC0u + (uint32_t)(v - 280), 8);
}

static const uint16_t len_base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                      31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
static const uint8_t len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                      2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const uint16_t dist_base[30] = {1,    2,    3,    4,    5,    7,     9,     13,    17,   25,
                                       33,   49,   65,   97,   129,  193,   257,   385,   513,  769,
                                       1025, 1537, 2049, 3073, 4097, 6145,  8193,  12289, 16385, 24577};
static const uint8_t dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                       6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

static void put_match(bitw *w, int len, int dist) {
    int li = 28;
    while (len_base[li] > len) li--;
    put_litlen(w, 257 + li);
    put_bits(w, (uint32_t)(len - len_base[li]), len_extra[li]);
    int di = 29;
    while (dist_base[di] > dist) di--;
    put_huff(w, (uint32_t)di, 5);
    put_bits(w, (uint32_t)(dist - dist_base[di]), dist_extra[di]);
}

/* Compress raw[n] into out (capacity >= n * 9 / 8 + 16); returns the bytes written. */
static size_t deflate_fixed(const uint8_t *raw, size_t n, size_t row, uint8_t *out) {
    bitw w = {out, 0, 0, 0};
    put_bits(&w, 1, 1); /* BFINAL */
    put_bits(&w, 1, 2); /* BTYPE 01: fixed Huffman */
    size_t i = 0;
    while (i < n) {
        size_t best = 0, bd = 0;
        const size_t dists[2] = {3, row};
        for (int k = 0; k < 2; k++) {
            size_t d = dists[k], l = 0;
            if (d == 0 || d > 32768 || i < d) continue;
            while (l < 258 && i + l < n && raw[i + l] == raw[i + l - d]) l++;
            if (l > best) best = l, bd = d;
        }
        if (best >= 3) {
            put_match(&w, (int)best, (int)bd);
            i += best;
        } else {
            put_litlen(&w, raw[i]);
            i++;
        }
    }
    put_litlen(&w, 256); /* end of block */
    if (w.bits > 0) put_bits(&w, 0, 8 - w.bits);
    return w.n;
}

static int write_png(const char *path, int w, int h, const uint8_t *rgb) {
    crc_init();
    size_t raw_n = (size_t)h * (size_t)(1 + 3 * w);
    uint8_t *raw = malloc(raw_n);
    size_t z_n = 2 + raw_n / 8 * 9 + 32 + 4;
    uint8_t *z = malloc(z_n);
    if (!raw || !z) {
        free(raw);
        free(z);
        return -1;
    }
    for (int y = 0; y < h; y++) {
        uint8_t *row = raw + (size_t)y * (size_t)(1 + 3 * w);
        row[0] = 0; /* filter: none */
        memcpy(row + 1, rgb + (size_t)y * 3 * (size_t)w, 3 * (size_t)w);
    }
    size_t o = 0;
    z[o++] = 0x78; /* zlib header: deflate, 32K window, no dictionary */
    z[o++] = 0x01;
    uint32_t a = 1, b = 0; /* adler32 */
    for (size_t i = 0; i < raw_n; i++) {
        a = (a + raw[i]) % 65521;
        b = (b + a) % 65521;
    }
    o += deflate_fixed(raw, raw_n, (size_t)(1 + 3 * w), z + o);
    put32(z + o, (b << 16) | a);
    o += 4;
    uint8_t ihdr[13];
    put32(ihdr, (uint32_t)w);
    put32(ihdr + 4, (uint32_t)h);
    ihdr[8] = 8;  /* bit depth */
    ihdr[9] = 2;  /* RGB */
    ihdr[10] = 0; /* deflate */
    ihdr[11] = 0;
    ihdr[12] = 0;
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    FILE *f = fopen(path, "wb");
    int rc = -1;
    if (f) {
        rc = (fwrite(sig, 1, 8, f) == 8 && write_chunk(f, "IHDR", ihdr, 13) == 0 &&
              write_chunk(f, "IDAT", z, o) == 0 && write_chunk(f, "IEND", NULL, 0) == 0)
                 ? 0
                 : -1;
        if (fclose(f) != 0) rc = -1;
    }
    free(raw);
    free(z);
    return rc;
}

/* ---- canvas ---------------------------------------------------------------------------------- */

typedef struct {
    int w, h;
    uint8_t *p;
} canvas;

static void px(canvas *c, int x, int y, const uint8_t *col) {
    if (x < 0 || y < 0 || x >= c->w || y >= c->h) return;
    memcpy(c->p + ((size_t)y * (size_t)c->w + (size_t)x) * 3, col, 3);
}

static void line(canvas *c, double x0, double y0, double x1, double y1, const uint8_t *col,
                 int thick) {
    double dx = x1 - x0, dy = y1 - y0;
    int n = (int)(fabs(dx) > fabs(dy) ? fabs(dx) : fabs(dy)) + 1;
    for (int i = 0; i <= n; i++) {
        double t = (double)i / n;
        int x = (int)lround(x0 + t * dx), y = (int)lround(y0 + t * dy);
        for (int a = -thick / 2; a <= thick / 2; a++)
            for (int b = -thick / 2; b <= thick / 2; b++) px(c, x + a, y + b, col);
    }
}

/* 5x7 glyphs, one byte per row (bit 4 = leftmost column). */
typedef struct {
    char ch;
    uint8_t rows[7];
} glyph;
static const glyph font[] = {
    {'0', {14, 17, 19, 21, 25, 17, 14}}, {'1', {4, 12, 4, 4, 4, 4, 14}},
    {'2', {14, 17, 1, 2, 4, 8, 31}},     {'3', {30, 1, 1, 14, 1, 1, 30}},
    {'4', {2, 6, 10, 18, 31, 2, 2}},     {'5', {31, 16, 30, 1, 1, 17, 14}},
    {'6', {6, 8, 16, 30, 17, 17, 14}},   {'7', {31, 1, 2, 4, 8, 8, 8}},
    {'8', {14, 17, 17, 14, 17, 17, 14}}, {'9', {14, 17, 17, 15, 1, 2, 12}},
    {'a', {0, 0, 14, 1, 15, 17, 15}},    {'b', {16, 16, 22, 25, 17, 17, 30}},
    {'c', {0, 0, 14, 16, 16, 17, 14}},   {'d', {1, 1, 13, 19, 17, 17, 15}},
    {'e', {0, 0, 14, 17, 31, 16, 14}},   {'f', {6, 9, 8, 28, 8, 8, 8}},
    {'g', {0, 15, 17, 17, 15, 1, 14}},   {'h', {16, 16, 22, 25, 17, 17, 17}},
    {'i', {4, 0, 12, 4, 4, 4, 14}},      {'j', {2, 0, 6, 2, 2, 18, 12}},
    {'k', {16, 16, 18, 20, 24, 20, 18}}, {'l', {12, 4, 4, 4, 4, 4, 14}},
    {'m', {0, 0, 26, 21, 21, 17, 17}},   {'n', {0, 0, 22, 25, 17, 17, 17}},
    {'o', {0, 0, 14, 17, 17, 17, 14}},   {'p', {0, 0, 30, 17, 30, 16, 16}},
    {'q', {0, 0, 13, 19, 15, 1, 1}},     {'r', {0, 0, 22, 25, 16, 16, 16}},
    {'s', {0, 0, 14, 16, 14, 1, 30}},    {'t', {8, 8, 28, 8, 8, 9, 6}},
    {'u', {0, 0, 17, 17, 17, 19, 13}},   {'v', {0, 0, 17, 17, 17, 10, 4}},
    {'w', {0, 0, 17, 17, 21, 21, 10}},   {'x', {0, 0, 17, 10, 4, 10, 17}},
    {'y', {0, 0, 17, 17, 15, 1, 14}},    {'z', {0, 0, 31, 2, 4, 8, 31}},
    {'.', {0, 0, 0, 0, 0, 12, 12}},      {'-', {0, 0, 0, 14, 0, 0, 0}},
    {'_', {0, 0, 0, 0, 0, 0, 31}},       {'+', {0, 4, 4, 31, 4, 4, 0}},
    {'(', {2, 4, 8, 8, 8, 4, 2}},        {')', {8, 4, 2, 2, 2, 4, 8}},
    {'|', {4, 4, 4, 4, 4, 4, 4}},        {'/', {1, 1, 2, 4, 8, 16, 16}},
    {',', {0, 0, 0, 0, 12, 4, 8}},       {':', {0, 12, 12, 0, 12, 12, 0}},
    {'=', {0, 0, 31, 0, 31, 0, 0}},      {'%', {24, 25, 2, 4, 8, 19, 3}},
};

static const uint8_t *glyph_of(char ch) {
    if (ch >= 'A' && ch <= 'Z') ch = (char)(ch - 'A' + 'a');
    for (size_t i = 0; i < sizeof font / sizeof font[0]; i++)
        if (font[i].ch == ch) return font[i].rows;
    return NULL; /* space and unknown characters: blank */
}

/* Text with scale s (pixels per font dot); vertical = rotated 90 degrees counter-clockwise. */
static void text(canvas *c, int x, int y, const char *s, int scale, const uint8_t *col, int vertical) {
    for (int i = 0; s[i]; i++) {
        const uint8_t *g = glyph_of(s[i]);
        if (g)
            for (int r = 0; r < 7; r++)
                for (int k = 0; k < 5; k++)
                    if (g[r] & (16 >> k))
                        for (int a = 0; a < scale; a++)
                            for (int b = 0; b < scale; b++) {
                                int gx = k * scale + a, gy = r * scale + b;
                                if (vertical)
                                    px(c, x + gy, y - i * 6 * scale - gx, col);
                                else
                                    px(c, x + i * 6 * scale + gx, y + gy, col);
                            }
    }
}

static int text_width(const char *s, int scale) { return (int)strlen(s) * 6 * scale; }

/* ---- chart ----------------------------------------------------------------------------------- */

static const uint8_t BLACK[3] = {0, 0, 0}, GRID[3] = {225, 225, 225}, GREY[3] = {110, 110, 110};
static const uint8_t COLORS[6][3] = {{31, 119, 180}, {214, 39, 40}, {255, 127, 14},
                                     {44, 160, 44},  {148, 103, 189}, {140, 86, 75}};

static void draw_panel(canvas *c, int ox, int oy, int pw, int ph, const plot_panel *P) {
    const int L = 90, R = 20, T = 40, B = 70 + 22 * P->nseries; /* legend below the axes */
    int x0 = ox + L, x1 = ox + pw - R, y0 = oy + T, y1 = oy + ph - B;
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (int s = 0; s < P->nseries; s++)
        for (int i = 0; i < P->series[s].n; i++) {
            double x = P->series[s].x[i], y = P->series[s].y[i];
            if (!(x > 0) || !(y > 0) || !isfinite(y)) continue;
            xmin = fmin(xmin, x), xmax = fmax(xmax, x), ymin = fmin(ymin, y), ymax = fmax(ymax, y);
        }
    if (!(xmin < INFINITY)) xmin = 0.01, xmax = 10, ymin = 1e-3, ymax = 1;
    double lx0 = floor(log10(xmin)), lx1 = ceil(log10(xmax));
    double ly0 = floor(log10(ymin)), ly1 = ceil(log10(ymax));
    if (lx1 <= lx0) lx1 = lx0 + 1;
    if (ly1 <= ly0) ly1 = ly0 + 1;
#define MAPX(v) (x0 + (log10(v) - lx0) / (lx1 - lx0) * (x1 - x0))
#define MAPY(v) (y1 - (log10(v) - ly0) / (ly1 - ly0) * (y1 - y0))
    char buf[64];
    for (double e = lx0; e <= lx1 + 1e-9; e += 1) /* decades and 2x, 5x minor lines */
        for (int m = 1; m <= 9; m++) {
            double v = pow(10, e) * m;
            if (log10(v) > lx1 + 1e-9) break;
            double X = MAPX(v);
            line(c, X, y0, X, y1, GRID, 1);
            if (m == 1 || m == 2 || m == 5) {
                snprintf(buf, sizeof buf, "%g", v);
                text(c, (int)X - text_width(buf, 2) / 2, y1 + 8, buf, 2, BLACK, 0);
            }
        }
    for (double e = ly0; e <= ly1 + 1e-9; e += 1) {
        double Y = MAPY(pow(10, e));
        line(c, x0, Y, x1, Y, GRID, 1);
        snprintf(buf, sizeof buf, "1e%d", (int)e);
        text(c, x0 - 8 - text_width(buf, 2), (int)Y - 7, buf, 2, BLACK, 0);
    }
    line(c, x0, y0, x0, y1, BLACK, 1);
    line(c, x0, y1, x1, y1, BLACK, 1);
    line(c, x1, y0, x1, y1, BLACK, 1);
    line(c, x0, y0, x1, y0, BLACK, 1);
    text(c, ox + (pw - text_width(P->title, 2)) / 2, oy + 12, P->title, 2, BLACK, 0);
    text(c, x0 + (x1 - x0 - text_width(P->xlabel, 2)) / 2, y1 + 34, P->xlabel, 2, GREY, 0);
    text(c, ox + 8, y0 + (y1 - y0 + text_width(P->ylabel, 2)) / 2, P->ylabel, 2, GREY, 1);
    for (int s = 0; s < P->nseries; s++) {
        const plot_series *S = &P->series[s];
        const uint8_t *col = COLORS[s % 6];
        int have = 0;
        double px0 = 0, py0 = 0;
        for (int i = 0; i < S->n; i++) {
            double x = S->x[i], y = S->y[i];
            if (!(x > 0) || !(y > 0) || !isfinite(y)) {
                have = 0;
                continue;
            }
            double X = MAPX(x), Y = MAPY(y);
            int thick = 2 * s < P->nseries ? 5 : 3; /* later series thinner: overlaps stay visible */
            if (have) line(c, px0, py0, X, Y, col, thick);
            for (int a = -4; a <= 4; a++) line(c, X - 4, Y + a, X + 4, Y + a, col, 1);
            px0 = X, py0 = Y, have = 1;
        }
        int ly = y1 + 62 + 22 * s, lx = x0 + 20;
        line(c, lx, ly + 7, lx + 30, ly + 7, col, 3);
        text(c, lx + 38, ly, S->name, 2, BLACK, 0);
    }
#undef MAPX
#undef MAPY
}

int plot_write_png(const char *path, int npanels, const plot_panel *panels) {
    const int pw = 760, ph = 620;
    canvas c;
    c.w = pw * npanels;
    c.h = ph;
    c.p = malloc((size_t)c.w * (size_t)c.h * 3);
    if (!c.p) return -1;
    memset(c.p, 255, (size_t)c.w * (size_t)c.h * 3);
    for (int i = 0; i < npanels; i++) draw_panel(&c, i * pw, 0, pw, ph, &panels[i]);
    int rc = write_png(path, c.w, c.h, c.p);
    free(c.p);
    return rc;
}
