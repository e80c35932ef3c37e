/* main.c — the inferd binary: dispatches to the subcommands in src/cli/. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command;

static const command COMMANDS[] = {
    {"serve", cli_serve, "OpenAI-compatible HTTP server: [-m FILE] [--host H] [--port P] ... (serve --help)"},
    {"generate", cli_generate, "generate a completion: -m FILE -p TEXT [-n N] [--temp T] [--seed S] [--ids] ... (generate --help)"},
    {"tokenize", cli_tokenize, "print token ids: -m FILE [--bos] (TEXT | -f TEXTFILE), or --chat REQUEST.json"},
    {"info", cli_info, "describe a model file: -m FILE"},
    {"logits", cli_logits, "print the logits of every position: -m FILE --ids \"1 2 3\" [--kv-cache-dtype D]"},
    {"bench", cli_bench, "offline throughput: -m FILE [--num-requests N] [--input-len-range A:B] [--output-len-range C:D] ... (bench --help)"},
    {"perplexity", cli_perplexity, "perplexity of a text (llama-perplexity's method): -m FILE -f TEXT [--ctx N] [--kl-base BASE.gguf] ... (perplexity --help)"},
    {"quantize", cli_quantize, "write a quantized copy of a GGUF file: IN.gguf OUT.gguf --type q8_0|q4_0|q4_k|q5_k|q6_k|int8|int4 ... (quantize --help)"},
    {"chat-template", cli_chat_template, "render a chat template: -t FILE.jinja -i CASE.json"},
    {"grammar", cli_grammar, "check or sample a grammar: (--json-schema FILE | --gbnf FILE | --regex RE | --json-object) [--check] [-m VOCAB --sample N] ..."},
};

static void usage(FILE *fp) {
    fprintf(fp, "usage: inferd COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(COMMANDS) / sizeof(COMMANDS[0]); i++)
        fprintf(fp, "  %-14s %s\n", COMMANDS[i].name, COMMANDS[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof(COMMANDS) / sizeof(COMMANDS[0]); i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "inferd: unknown command '%s' (try inferd --help)\n", argv[1]);
    return 2;
}
