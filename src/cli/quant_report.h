/* quant_report.h — `inferd quantize … --calibration TEXT --report`: per-layer sensitivity.
 *
 * The calibration text runs through the original model; each linear matrix's input
 * rows are sampled, and for each matrix of each layer the relative error of its output
 * after quantization, ||(Q(W) - W) X|| / ||W X|| over those rows (W as it will be
 * quantized: with the AWQ scales folded in), is printed, sorted. Then the layers are
 * ranked by their worst matrix, and perplexity on the calibration text finds the
 * fewest top-ranked layers to leave in full precision so that the quantized model is
 * within budget of the original: the suggested --quantize-keep-layers. CLI thread. */
#ifndef INFERD_CLI_QUANT_REPORT_H
#define INFERD_CLI_QUANT_REPORT_H
#include "../util/layer/cli.h"

#include <stdio.h>

#include "../model/model_quant.h"

typedef struct quant_report_opts {
    const char *model_path;
    const char *calibration; /* the text */
    int bits;                /* 8 / 4: model_quantize at qo.group_size; 0: model_quantize_to(type) */
    ggml_type type;          /* the type the matrices become */
    model_quant_opts qo;     /* lm_head, n_threads (keep: ignored, the report chooses) */
    double budget_pct;       /* perplexity budget over the original, percent */
} quant_report_opts;

/* Print the report on out. 0, or 1 with one line on stderr. */
int quant_report(const quant_report_opts *o, FILE *out);

#endif
