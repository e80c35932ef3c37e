/* cmd_chat_template.c — `inferd chat-template -t FILE.jinja -i CASE.json`: render one
 * conversation with a chat template and write the prompt to stdout exactly (no added
 * newline). CASE.json is the template context: messages, tools,
 * add_generation_prompt, bos_token, eos_token and any other variables.
 *
 * strftime_now() reports the real local time unless --now (or the environment variable
 * INFERD_FIXED_NOW) pins it, e.g. --now '2026-11-29 12:00:00' as the expected files in
 * ../shared/templates/expected were made.
 *
 * Exit 0 on success; 1 with one line on stderr (the template's message, e.g. the text
 * given to raise_exception) when rendering fails; 2 on usage or input errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "template/chat_template.h"
#include "util/common.h"

static void usage(FILE *fp) {
    fprintf(fp,
            "usage: inferd chat-template -t FILE.jinja -i CASE.json [--now 'YYYY-MM-DD HH:MM:SS']\n"
            "       [--max-output BYTES] [--max-seconds S] [--max-steps N]\n");
}

int cli_chat_template(int argc, char **argv) {
    const char *tpath = NULL, *ipath = NULL;
    chat_template_limits lim = {0};
    lim.fixed_now = getenv("INFERD_FIXED_NOW");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if ((!strcmp(a, "-t") || !strcmp(a, "--template")) && has_val) tpath = argv[++i];
        else if ((!strcmp(a, "-i") || !strcmp(a, "--input")) && has_val) ipath = argv[++i];
        else if (!strcmp(a, "--now") && has_val) lim.fixed_now = argv[++i];
        else if (!strcmp(a, "--max-output") && has_val) lim.max_output_bytes = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--max-seconds") && has_val) lim.max_seconds = strtod(argv[++i], NULL);
        else if (!strcmp(a, "--max-steps") && has_val) lim.max_steps = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "inferd chat-template: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!tpath || !ipath) {
        usage(stderr);
        return 2;
    }
    char err[1024] = "";
    char *tsrc = NULL, *isrc = NULL, *out = NULL;
    size_t tn = 0, in = 0, on = 0;
    cJSON *ctx = NULL;
    chat_template *t = NULL;
    int rc = 2;
    if (ifd_read_file(tpath, &tsrc, &tn, err, sizeof(err)) || ifd_read_file(ipath, &isrc, &in, err, sizeof(err))) {
        fprintf(stderr, "inferd chat-template: %s\n", err);
        goto done;
    }
    ctx = cJSON_ParseWithLength(isrc, in);
    if (!ctx || !cJSON_IsObject(ctx)) {
        fprintf(stderr, "inferd chat-template: %s: not a JSON object\n", ipath);
        goto done;
    }
    if (chat_template_create(&t, tsrc, tn, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        rc = 1;
        goto done;
    }
    if (chat_template_render(t, ctx, &lim, &out, &on, err, sizeof(err))) {
        fprintf(stderr, "%s\n", err);
        rc = 1;
        goto done;
    }
    rc = fwrite(out, 1, on, stdout) == on && fflush(stdout) == 0 ? 0 : 1;
done:
    free(out);
    chat_template_destroy(t);
    cJSON_Delete(ctx);
    free(tsrc);
    free(isrc);
    return rc;
}
