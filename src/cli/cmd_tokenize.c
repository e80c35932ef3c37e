/* cmd_tokenize.c — `inferd tokenize -m FILE [--bos] [--special] (TEXT | -f TEXTFILE...)`:
 * print the token ids of the text, space-separated on one line (one line per -f file,
 * in order, when -f is given several times).
 *
 * `inferd tokenize -m FILE --chat REQUEST.json [-t FILE.jinja] [--bos]`: the server's
 * chat path without weights — REQUEST.json is a /v1/chat/completions body (messages,
 * tools, chat_template_kwargs, chat_template ...), rendered with -t, else the file's
 * tokenizer.chat_template (else ChatML), and tokenized by chat_prompt exactly as
 * `inferd serve` does; prints {"prompt": TEXT, "tokens": [ids]} on one line. A request
 * the server would refuse gives its error message on stderr and exit 1.
 *
 * Only the GGUF metadata is read (gguf_open + tok_create), never the weights. --bos
 * adds what the vocabulary asks for (add_bos_token / add_eos_token), like llama.cpp's
 * add_special; --special matches control tokens in the text. With -f the file's bytes
 * are the text exactly (no newline stripped). Errors: one line on stderr, exit 1, and
 * nothing on stdout (all files are read before anything is printed). */
#include <stdio.h>
#include <string.h>

#include "../model/gguf.h"
#include "../server/chat.h"
#include "../tokenizer/tokenizer.h"
#include "../util/common.h"
#include "cli.h"

#define USAGE                                                                                      \
    "usage: -m FILE [--bos] [--special] (TEXT | -f TEXTFILE...), or -m FILE --chat REQUEST.json "    \
    "[-t FILE.jinja] [--bos]"

/* --chat: one request through chat_prompt. Returns the exit status. */
static int chat_tokens(const gguf_file *f, const tokenizer *t, const char *req_path, const char *tmpl_path,
                       unsigned flags) {
    char err[512];
    char *body = NULL, *tsrc = NULL, *model_tmpl = NULL;
    size_t body_n = 0, tn = 0;
    chat_ctx *c = NULL;
    oai_request r;
    oai_prompt p = {0};
    api_error e = {0};
    int status = 1;
    memset(&r, 0, sizeof r);
    if (ifd_read_file(req_path, &body, &body_n, err, sizeof err) ||
        (tmpl_path && ifd_read_file(tmpl_path, &tsrc, &tn, err, sizeof err))) {
        fprintf(stderr, "inferd tokenize: %s\n", err);
        goto done;
    }
    gguf_str mt;
    if (gguf_get_str(f, "tokenizer.chat_template", &mt) && !(model_tmpl = strndup(mt.s, (size_t)mt.n))) {
        fprintf(stderr, "inferd tokenize: out of memory\n");
        goto done;
    }
    chat_limits lim = {0};
    if (chat_create_vocab(&c, t, model_tmpl, tsrc, &lim, err, sizeof err)) {
        fprintf(stderr, "inferd tokenize: %s\n", err);
        goto done;
    }
    oai_limits ol = {.max_n = 1, .max_prompts = 1, .n_vocab = tok_n_vocab(t), .allow_request_chat_template = true};
    if (oai_parse(&r, OAI_CHAT, body, body_n, &ol, &e) || chat_prompt(c, &r, flags & TOK_ENC_ADD_BOS, &p, &e)) {
        fprintf(stderr, "inferd tokenize: %s: %d %s\n", req_path, e.status, e.message);
        goto done;
    }
    sbuf b = {0};
    sbuf_puts(&b, "{\"prompt\":");
    sbuf_json_str(&b, p.text, p.text_bytes);
    sbuf_puts(&b, ",\"tokens\":[");
    for (int32_t i = 0; i < p.n_ids; i++) sbuf_printf(&b, i ? ",%d" : "%d", (int)p.ids[i]);
    sbuf_puts(&b, "]}\n");
    bool ok = !b.oom && fwrite(b.p, 1, b.n, stdout) == b.n && fflush(stdout) == 0;
    sbuf_free(&b);
    if (!ok) {
        fprintf(stderr, "inferd tokenize: write error\n");
        goto done;
    }
    status = 0;
done:
    free(p.ids);
    free(p.text);
    oai_request_free(&r);
    chat_destroy(c);
    free(model_tmpl);
    free(tsrc);
    free(body);
    return status;
}

int cli_tokenize(int argc, char **argv) {
    const char *path = NULL, *text = NULL, *chat = NULL, *tmpl = NULL;
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
        } else if (!strcmp(argv[i], "--chat") && i + 1 < argc) {
            chat = argv[++i];
        } else if (!strcmp(argv[i], "-t") && i + 1 < argc) {
            tmpl = argv[++i];
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
    if (!path || (!chat && ((!text && n_files == 0) || (text && n_files > 0))) ||
        (chat && (text || n_files > 0 || (flags & TOK_ENC_PARSE_SPECIAL))) || (tmpl && !chat)) {
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
    if (chat) {
        status = chat_tokens(&f, t, chat, tmpl, flags);
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
