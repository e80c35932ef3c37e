/* cli.h — the subcommands of the inferd binary. Each takes argv after the command
 * name (argv[0] is the command) and returns the process exit code. Errors print one
 * clear line on stderr. Only main.c calls these. */
#ifndef INFERD_CLI_H
#define INFERD_CLI_H
#include "../util/layer/cli.h"

int cli_generate(int argc, char **argv);      /* cmd_generate.c */
int cli_tokenize(int argc, char **argv);      /* cmd_tokenize.c */
int cli_info(int argc, char **argv);          /* cmd_info.c */
int cli_logits(int argc, char **argv);        /* cmd_logits.c (test/debug: dump logits) */
int cli_chat_template(int argc, char **argv); /* cmd_chat_template.c */
int cli_bench(int argc, char **argv);         /* cmd_bench.c */
int cli_perplexity(int argc, char **argv);    /* cmd_perplexity.c */
int cli_quantize(int argc, char **argv);      /* cmd_quantize.c */
int cli_serve(int argc, char **argv);         /* cmd_serve.c -> src/server/ */
int cli_grammar(int argc, char **argv);       /* cmd_grammar.c (test/debug: grammars without a model) */

#endif
