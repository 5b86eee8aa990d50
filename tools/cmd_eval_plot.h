/* Minimal PNG line chart for `mlakv eval --plot` (no plotting library: a small rasterizer with
 * a built-in 5x7 font and a PNG writer with its own fixed-Huffman deflate). */
#ifndef MLAKV_TOOLS_CMD_EVAL_PLOT_H
#define MLAKV_TOOLS_CMD_EVAL_PLOT_H

typedef struct {
    const char *name;
    int n;
    const double *x, *y; /* y <= 0 points are skipped (log axis) */
} plot_series;

typedef struct {
    const char *title, *xlabel, *ylabel;
    int nseries;
    const plot_series *series;
} plot_panel;

/* Write a PNG with the panels side by side, each log-x / log-y with one line per series and a
 * legend. Returns 0 on success, -1 (errno set by stdio) if the file cannot be written. */
int plot_write_png(const char *path, int npanels, const plot_panel *panels);

#endif
