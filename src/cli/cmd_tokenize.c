/* cmd_tokenize.c — `inferd tokenize -m FILE [--bos] [--special] (TEXT | -f TEXTFILE)`:
 * print the token ids of the text, space-separated on one line.
 *
 * Only the GGUF metadata is read (gguf_open + tok_create), never the weights. --bos
 * adds what the vocabulary asks for (add_bos_token / add_eos_token), like llama.cpp's
 * add_special; --special matches control tokens in the text. With -f the file's bytes
 * are the text exactly (no newline stripped). Errors: one line on stderr, exit 1. */
#include <stdio.h>
#include <string.h>

#include "../model/gguf.h"
#include "../tokenizer/tokenizer.h"
#include "../util/common.h"
#include "cli.h"

int cli_tokenize(int argc, char **argv) {
    const char *path = NULL, *text = NULL, *text_file = NULL;
    unsigned flags = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) {
            path = argv[++i];
        } else if (!strcmp(argv[i], "-f") && i + 1 < argc) {
            text_file = argv[++i];
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
            return 1;
        }
    }
    if (!path || (!text) == (!text_file)) {
        fprintf(stderr, "inferd tokenize: usage: -m FILE [--bos] [--special] (TEXT | -f TEXTFILE)\n");
        return 1;
    }

    int status = 1;
    char err[512];
    gguf_file f = {0};
    tokenizer *t = NULL;
    char *buf = NULL;
    int32_t *ids = NULL;
    size_t n_text, n_ids = 0;
    int rc;

    if (text_file) {
        if ((rc = ifd_read_file(text_file, &buf, &n_text, err, sizeof err))) {
            fprintf(stderr, "inferd tokenize: %s\n", err);
            goto done;
        }
        text = buf;
    } else {
        n_text = strlen(text);
    }
    if ((rc = gguf_open(&f, path, err, sizeof err))) {
        fprintf(stderr, "inferd tokenize: %s\n", err);
        goto done;
    }
    if ((rc = tok_create(&t, &f, err, sizeof err))) {
        fprintf(stderr, "inferd tokenize: %s: %s\n", path, err);
        goto done;
    }
    if ((rc = tok_encode(t, text, n_text, flags, &ids, &n_ids))) {
        fprintf(stderr, "inferd tokenize: %s\n", ifd_status_str(rc));
        goto done;
    }
    for (size_t i = 0; i < n_ids; i++) printf(i ? " %d" : "%d", (int)ids[i]);
    printf("\n");
    if (fflush(stdout) != 0) {
        fprintf(stderr, "inferd tokenize: write error\n");
        goto done;
    }
    status = 0;

done:
    free(ids);
    tok_destroy(t);
    gguf_close(&f);
    free(buf);
    return status;
}
