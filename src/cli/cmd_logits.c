/* cmd_logits.c — `inferd logits -m FILE --ids "1 2 3"`: one line per position with
 * the full vocabulary's logits (%.9g), ids used verbatim (no BOS). The contract the
 * NumPy cross-check tests use. */
#include <stdio.h>
#include <string.h>

#include "../model/model.h"
#include "../tokenizer/tokenizer.h"
#include "../util/common.h"
#include "cli.h"
#include "cli_util.h"

int cli_logits(int argc, char **argv) {
    const char *path = NULL, *ids_s = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc)
            path = argv[++i];
        else if (!strcmp(argv[i], "--ids") && i + 1 < argc)
            ids_s = argv[++i];
        else {
            fprintf(stderr, "inferd logits: unknown or incomplete option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!path || !ids_s) {
        fprintf(stderr, "inferd logits: usage: -m FILE --ids \"1 2 3\"\n");
        return 2;
    }
    int32_t *ids = NULL, n = 0;
    if (!cli_parse_ids(ids_s, &ids, &n) || n == 0) {
        fprintf(stderr, "inferd logits: --ids must be a non-empty list of token ids\n");
        free(ids);
        return 2;
    }
    char err[512];
    model *m = NULL;
    seq_runner r = {0};
    float *logits = NULL;
    int ret = 1;
    if (model_load(&m, path, err, sizeof err)) {
        fprintf(stderr, "inferd logits: %s\n", err);
        goto done;
    }
    for (int32_t i = 0; i < n; i++)
        if (ids[i] >= (int32_t)m->hp.n_vocab) {
            fprintf(stderr, "inferd logits: token id %d out of range (vocabulary %u)\n", ids[i],
                    m->hp.n_vocab);
            goto done;
        }
    if (seq_runner_init(&r, m, n, err, sizeof err)) {
        fprintf(stderr, "inferd logits: %s\n", err);
        goto done;
    }
    logits = malloc((size_t)n * m->hp.n_vocab * sizeof(float));
    if (!logits || seq_runner_feed(&r, ids, n, true, logits)) {
        fprintf(stderr, "inferd logits: forward failed\n");
        goto done;
    }
    for (int32_t t = 0; t < n; t++) {
        const float *row = logits + (size_t)t * m->hp.n_vocab;
        for (uint32_t v = 0; v < m->hp.n_vocab; v++)
            printf(v ? " %.9g" : "%.9g", (double)row[v]);
        printf("\n");
    }
    ret = 0;
done:
    free(logits);
    free(ids);
    seq_runner_deinit(&r);
    model_destroy(m);
    return ret;
}
