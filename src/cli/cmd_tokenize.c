/* cmd_tokenize.c — `inferd tokenize -m FILE [--bos] [--special] (TEXT | -f TEXTFILE...)`:
 * print the token ids of the text, space-separated on one line (one line per -f file,
 * in order, when -f is given several times).
 *
 * Only the GGUF metadata is read (gguf_open + tok_create), never the weights. --bos
 * adds what the vocabulary asks for (add_bos_token / add_eos_token), like llama.cpp's
 * add_special; --special matches control tokens in the text. With -f the file's bytes
 * are the text exactly (no newline stripped). Errors: one line on stderr, exit 1, and
 * nothing on stdout (all files are read before anything is printed). */
#include <stdio.h>
#include <string.h>

#include "../model/gguf.h"
#include "../tokenizer/tokenizer.h"
#include "../util/common.h"
#include "cli.h"

#define USAGE "usage: -m FILE [--bos] [--special] (TEXT | -f TEXTFILE...)"

int cli_tokenize(int argc, char **argv) {
    const char *path = NULL, *text = NULL;
    unsigned flags = 0;
    int n_files = 0;
    int status = 1;
    char err[512];
    gguf_file f = {0};
    tokenizer *t = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int rc;
    /* argc bounds the number of -f options */
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    char **bufs = calloc((size_t)argc + 1, sizeof *bufs);
    size_t *lens = calloc((size_t)argc + 1, sizeof *lens);
    if (!files || !bufs || !lens) {
        fprintf(stderr, "inferd tokenize: out of memory\n");
        goto done;
    }

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) {
            path = argv[++i];
        } else if (!strcmp(argv[i], "-f") && i + 1 < argc) {
            files[n_files++] = argv[++i];
        } else if (!strcmp(argv[i], "--bos")) {
            flags |= TOK_ENC_ADD_BOS | TOK_ENC_ADD_EOS;
        } else if (!strcmp(argv[i], "--special")) {
            flags |= TOK_ENC_PARSE_SPECIAL;
        } else if (!strcmp(argv[i], "--") && i + 2 == argc && !text) {
            text = argv[++i];
        } else if ((argv[i][0] != '-' || argv[i][1] == 0) && !text) {
            text = argv[i];
        } else {
            fprintf(stderr, "inferd tokenize: unknown or incomplete option '%s'\n", argv[i]);
            goto done;
        }
    }
    if (!path || (!text && n_files == 0) || (text && n_files > 0)) {
        fprintf(stderr, "inferd tokenize: " USAGE "\n");
        goto done;
    }

    if (text) {
        bufs[0] = (char *)text; /* not freed: argv */
        lens[0] = strlen(text);
    }
    for (int k = 0; k < n_files; k++) {
        if ((rc = ifd_read_file(files[k], &bufs[k], &lens[k], err, sizeof err))) {
            fprintf(stderr, "inferd tokenize: %s\n", err);
            goto done;
        }
    }
    if ((rc = gguf_open(&f, path, err, sizeof err))) {
        fprintf(stderr, "inferd tokenize: %s\n", err);
        goto done;
    }
    if ((rc = tok_create(&t, &f, err, sizeof err))) {
        fprintf(stderr, "inferd tokenize: %s: %s\n", path, err);
        goto done;
    }
    for (int k = 0; k < (text ? 1 : n_files); k++) {
        if ((rc = tok_encode(t, bufs[k], lens[k], flags, &ids, &n_ids))) {
            fprintf(stderr, "inferd tokenize: %s: %s\n", text ? "TEXT" : files[k], ifd_status_str(rc));
            goto done;
        }
        for (size_t i = 0; i < n_ids; i++) printf(i ? " %d" : "%d", (int)ids[i]);
        printf("\n");
        free(ids);
        ids = NULL;
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "inferd tokenize: write error\n");
        goto done;
    }
    status = 0;

done:
    free(ids);
    tok_destroy(t);
    gguf_close(&f);
    for (int k = 0; bufs && k < n_files; k++) free(bufs[k]);
    free(bufs);
    free(lens);
    free(files);
    return status;
}
